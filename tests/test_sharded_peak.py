"""The modelled peak of FSDP2, ZeroRedundancyOptimizer and DistributedDataParallel ranks (memmath/sharded_peak.py)
against PyTorch over gloo.

Three recordings, reported apart: validation/sharded.py's 18 runs (the fitting set: the model was written against
torch's source and checked on them), validation/sharded_held_out.py's runs (recorded after the model: other shapes,
sizes, three ranks and activation checkpointing) and validation/ddp.py's DDP runs (all held out: recorded after the
DDP peak, which no earlier recording could fit).
"""

import json
from pathlib import Path

import pandas as pd
import pytest

import memmath as mm
from memmath.sharded_peak import fsdp2_units, sharded_peak, why_no_sharded_peak
from memmath_lessons.reference.measured import case_arguments, case_model, load_measured_sharded

HELD_OUT_FILE = Path(__file__).resolve().parent.parent / "validation" / "sharded_held_out.json"
STEPS = {"first": "peak_step1", "steady": "peak_step2"}


def _held_out() -> pd.DataFrame:
    rows = []
    for record in json.loads(HELD_OUT_FILE.read_text(encoding="utf-8"))["sharded_cases"]:
        config = dict(record["config"])
        model = config.pop("model")
        rows.append({**config, **model, **record["measured"]})
    return pd.DataFrame(rows)


FITTING, HELD_OUT = load_measured_sharded(), _held_out()


def _run(row, rank, **extra):
    sharding, stage = ("zero_redundancy", 1) if row["engine"] == "zero1" else ("fsdp2", 3)
    # the recorded ZeRO-1 runs all-reduce the gradients in place, without DistributedDataParallel's bucket copy
    return mm.Run(case_model(row), n_gpus=int(row["world_size"]), zero_stage=stage, sharding=sharding, rank=rank,
                  reshard_after_forward=row["engine"] != "fsdp2-noreshard", gradient_as_bucket_view=True,
                  **case_arguments(row), **extra)


def _errors(frame) -> list[tuple]:
    """(predicted / measured - 1, case, rank, step) of every rank's step peak."""
    out = []
    for _, row in frame.iterrows():
        for rank in range(int(row["world_size"])):
            for step, column in STEPS.items():
                predicted = sharded_peak(_run(row, rank), step=step).total
                out.append((predicted / row[f"{column}_bytes_per_rank"][rank] - 1, row["case_id"], rank, step))
    return out


def test_the_fitting_set_step_peaks():
    # 108 step peaks (18 runs, 2 or 4 ranks, 2 steps). 103 within 5%; the five below it (by 5.7-10.0%) are ranks
    # whose measured peak holds one root-sized collective buffer more (exactly the root's gathered size: 322,048 B in
    # GPT-2 fp32, 512,256 B in LLaMA fp32) while the same case's other ranks match the model to within 0.1%: the
    # signature of a free the profiler did not see, which the held-out recording confirms (_unseen_frees).
    errors = _errors(FITTING)
    assert len(errors) == 108
    assert sum(abs(e) <= 0.05 for e, *_ in errors) >= 103, [x for x in errors if abs(x[0]) > 0.05]
    assert all(-0.11 <= e <= 0.05 for e, *_ in errors), errors


def _unseen_frees(row, rank) -> int:
    """Bytes the profiler saw allocated and never freed by the end of the profile, above the optimizer states and
    the loss (4 B) that are alive then: collective buffers freed where the profiler did not see it. The running total
    only gains them, so at any earlier moment the measured peak is too high by at most this much."""
    return max(int(row["net_end_bytes_per_rank"][rank]) - int(row["optimizer_state_bytes_per_rank"][rank]) - 4, 0)


def test_the_held_out_step_peaks():
    # Recorded after the model. ZeroRedundancyOptimizer: every step peak within 5%. FSDP2 (checkpointing excluded:
    # refused by name, the bound answers it): never more than 5% above; where more than 5% below, the rank's profile
    # ends with at least that many bytes it saw allocated and never freed (_unseen_frees).
    modelled = HELD_OUT[~(HELD_OUT.checkpointing & HELD_OUT.engine.str.startswith("fsdp2"))]
    errors = _errors(modelled)
    assert len(errors) == 48  # 9 runs, 24 ranks, 2 steps
    assert all(abs(e) <= 0.05 for e, case, *_ in errors if "zero1" in case)
    assert all(e <= 0.05 for e, *_ in errors)
    for error, case, rank, step in errors:
        if error < -0.05:
            row = modelled[modelled.case_id == case].iloc[0]
            measured = row[f"{STEPS[step]}_bytes_per_rank"][rank]
            assert measured * (1 + error) >= measured - _unseen_frees(row, rank) - 0.05 * measured, (case, rank, step)
    print(sum(abs(e) <= 0.05 for e, *_ in errors), "of", len(errors), "held-out step peaks within 5%")


def test_fsdp2_with_checkpointing_is_judged_on_the_bound_above_its_measured_peaks():
    checkpointed = HELD_OUT[HELD_OUT.checkpointing & HELD_OUT.engine.str.startswith("fsdp2")]
    assert len(checkpointed) >= 4
    for _, row in checkpointed.iterrows():
        for rank in range(int(row["world_size"])):
            run = _run(row, rank)
            assert "checkpointing" in why_no_sharded_peak(run)
            need = mm.requirement(run)
            measured = max(row["peak_step1_bytes_per_rank"][rank], row["peak_step2_bytes_per_rank"][rank])
            assert need.basis == "upper bound" and need.bytes >= measured, (row["case_id"], rank)


def test_the_requirement_of_a_recorded_rank_is_its_modelled_peak():
    for frame in (FITTING, HELD_OUT):
        for _, row in frame.iterrows():
            if row["checkpointing"] and row["engine"] != "zero1":
                continue
            run = _run(row, 0)
            need = mm.requirement(run)
            assert need.basis == "peak" and need.bytes == sharded_peak(run).total, row["case_id"]


def test_fsdp2_units_by_hand():
    # GPT-2 at hidden 64 (validation/measure.py's gpt2: 3 blocks, MLP 256, vocabulary 1,000, 256 positions) on 3
    # ranks, fp32. A block: ln_1 (64, 64), c_attn (64 x 192 stored (64, 192) -> dim 0 = 64: 22 rows per rank, padded
    # to 66), ... computed tensor by tensor below from torch's Conv1D layout (in, out) and chunk's ceil(d0 / 3) rows.
    shape = case_model(FITTING[FITTING.case_id.str.startswith("gpt2/")].iloc[0])
    dims = {  # GPT2Block.parameters(): ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj (Conv1D: (in, out))
        "ln_1.weight": (64,), "ln_1.bias": (64,), "c_attn.weight": (64, 192), "c_attn.bias": (192,),
        "attn.c_proj.weight": (64, 64), "attn.c_proj.bias": (64,), "ln_2.weight": (64,), "ln_2.bias": (64,),
        "c_fc.weight": (64, 256), "c_fc.bias": (256,), "mlp.c_proj.weight": (256, 64), "mlp.c_proj.bias": (64,)}

    def padded(d, n=3):
        rows = -(-d[0] // n) * n
        rest = 1
        for x in d[1:]:
            rest *= x
        return rows * rest

    block = sum(padded(d) for d in dims.values())
    # the root: wte (1000, 64), wpe (256, 64), ln_f weight and bias (64,); the head is tied to wte
    root = padded((1000, 64)) + padded((256, 64)) + 2 * padded((64,))
    units = fsdp2_units(mm.Run(shape, n_gpus=3, zero_stage=3, sharding="fsdp2", precision="fp32", seq_len=64))
    assert units["block"] == 4 * block and units["root"] == 4 * root
    assert units["block_shard"] * 3 == units["block_grads"] == 4 * block


def test_keeping_the_blocks_gathered_adds_the_other_blocks_at_the_loss():
    # reshard_after_forward=False keeps every block's parameters from its forward to its backward: at the loss a rank
    # holds the L blocks' gathered parameters besides the last block's flat all-gather output, which both modes keep
    # until the root's post-forward (_fsdp_state.py), so the moment rises by exactly L x B, B a block's padded
    # unsharded bytes (fsdp2_units, checked by hand above).
    row = FITTING[FITTING.engine == "fsdp2"].iloc[0]
    kept, freed = sharded_peak(_run(row, 0).replace(reshard_after_forward=False)), sharded_peak(_run(row, 0))
    label = next(label for p, label, _ in freed.moments if p == "forward" and label.startswith("at the loss"))
    kept_moment, freed_moment = (dict(((p, l), v) for p, l, v in est.moments)[("forward", label)]
                                 for est in (kept, freed))
    block = fsdp2_units(_run(row, 0))["block"]
    assert kept_moment - freed_moment == int(row["n_layers"]) * block


def test_what_the_sharded_peak_does_not_model_is_refused_by_name():
    assert "even division" in why_no_sharded_peak(mm.Run("gpt2", n_gpus=2, zero_stage=3, seq_len=64))
    assert "gradient accumulation" in why_no_sharded_peak(
        mm.Run("gpt2", n_gpus=2, zero_stage=3, sharding="fsdp2", seq_len=64, grad_accum_steps=2))
    with pytest.raises(ValueError, match="no sharded peak model"):
        sharded_peak(mm.Run("gpt2", n_gpus=2, zero_stage=1, seq_len=64))
    # unmodelled sharded runs keep the safe upper bound
    assert mm.requirement("gpt2", n_gpus=2, zero_stage=3, seq_len=64).basis == "upper bound"


def test_distributed_data_parallel_buckets_beside_zero_redundancy_are_counted():
    # torch's ZeroRedundancyOptimizer is used with DistributedDataParallel, whose default buckets hold a second copy of
    # the gradients through the step: every moment rises by the gradients' bytes.
    row = FITTING[FITTING.engine == "zero1"].iloc[0]
    views, copies = sharded_peak(_run(row, 0)), sharded_peak(_run(row, 0).replace(gradient_as_bucket_view=False))
    grads = mm.training_memory(_run(row, 0)).gradients
    assert copies.total - views.total == grads


@pytest.mark.parametrize("settings", [dict(zero_stage=3, sharding="fsdp2"),
                                      dict(zero_stage=3, sharding="fsdp2", reshard_after_forward=False),
                                      dict(zero_stage=1, sharding="zero_redundancy")])
def test_more_data_parallel_gpus_never_raise_a_sharded_ranks_peak(settings):
    # more ranks shard more and gather the same units: a rank's peak never rises with the world size
    needs = [mm.requirement("llama-2-7b", batch_size=2, seq_len=512, n_gpus=n, **settings) for n in (2, 4, 8, 16)]
    assert all(need.basis == "peak" for need in needs)
    assert all(a.bytes >= b.bytes for a, b in zip(needs, needs[1:])), [need.bytes for need in needs]


def test_a_middle_block_holds_the_block_before_it_prefetched():
    # FSDP2's backward: every block but the first prefetches the block before it (_backward_prefetch), so in the
    # backward of the second block a rank holds its shards, the root's and two blocks' gathered parameters
    run = mm.Run("llama-2-7b", batch_size=1, seq_len=512, n_gpus=8, zero_stage=3, sharding="fsdp2")
    peak, units = sharded_peak(run), fsdp2_units(run)
    [weights] = [parts["weights"] for (_, label, _), parts in zip(peak.moments, peak.breakdown)
                 if label.startswith("in block 2 of 32")]
    assert weights == mm.training_memory(run).weights + units["root"] + 2 * units["block"]


@pytest.mark.parametrize("flag, reshard", [([], True), (["--no-reshard-after-forward"], False)])
def test_the_command_line_answers_both_fsdp2_modes_as_the_api(capsys, flag, reshard):
    from memmath import cli
    args = ["train", "llama-2-7b", "--gpus", "8", "--sharding", "fsdp2", "--zero", "3", "--seq", "512", "--json",
            "--gpu", "A100 80GB"]
    cli.main(args + flag)
    report = json.loads(capsys.readouterr().out)
    run = mm.Run(model="llama-2-7b", n_gpus=8, sharding="fsdp2", zero_stage=3, seq_len=512,
                 reshard_after_forward=reshard)
    assert f"reshard_after_forward={reshard}" in report["run"]
    assert report["verdict"]["required_bytes"] == mm.requirement(run).bytes


# DistributedDataParallel (validation/ddp.py): no earlier recording wrapped a model in DDP, so every run is held out,
# recorded after memmath/sharded_peak.py's DDP peak was written (the model was not changed after them).
DDP_FILE = Path(__file__).resolve().parent.parent / "validation" / "ddp.json"


def _ddp_frame() -> pd.DataFrame:
    rows = []
    for record in json.loads(DDP_FILE.read_text(encoding="utf-8"))["ddp_cases"]:
        config = dict(record["config"])
        model = config.pop("model")
        rows.append({**config, **model, **record["measured"]})
    return pd.DataFrame(rows)


DDP = _ddp_frame()


def _ddp_run(row, rank):
    return mm.Run(case_model(row), n_gpus=int(row["world_size"]), rank=rank,
                  gradient_as_bucket_view=row["engine"] == "ddp-view", **case_arguments(row))


def _bucket_bytes(row, rank) -> int:
    """DDP's own count of its buckets (its logging data's bucket sizes, bytes)."""
    return sum(int(x) for x in str(row["bucket_sizes_per_rank"][rank]).replace(",", " ").split())


def _ddp_unseen_frees(row, rank) -> int:
    """Bytes the profile ends with above what is alive then (the optimizer states, the buckets made inside the
    profile, the loss's 4 B): allocations the profiler saw and whose free it did not see."""
    return max(int(row["net_end_bytes_per_rank"][rank]) - int(row["optimizer_state_bytes_per_rank"][rank])
               - _bucket_bytes(row, rank) - 4, 0)


def test_ddp_buckets_are_the_gradients_bytes():
    # torch's own count of the Reducer's buckets equals the gradients' bytes memmath counts (every trainable parameter
    # in one bucket, in its dtype), and, with gradient_as_bucket_view=True, the gradients are those storages
    assert len(DDP) == 10
    for _, row in DDP.iterrows():
        for rank in range(int(row["world_size"])):
            grads = mm.training_memory(_ddp_run(row, rank)).gradients
            assert _bucket_bytes(row, rank) == grads == row["grad_bytes_per_rank"][rank], row["case_id"]


def test_the_ddp_held_out_step_peaks():
    # 10 runs, 23 ranks, 2 steps: all 46 step peaks within 2% of the model (38 within 0.1%) net of the frees the
    # profiler did not see. Only rank 1 of llama-wide fp32 with views and checkpointing has any: the model is 19% below
    # it in both steps, and its profile ends with 3,085,976 B it saw allocated before step 1 and never saw
    # freed (the parameters' size, as the coalesced broadcast of DDP's wrapping makes; rank 0 of the same case and the
    # same case without views end with none). Without the buckets (the one-GPU peak) 41 of the 46 are 7-24% below.
    errors, below_one_gpu = [], 0
    for _, row in DDP.iterrows():
        for rank in range(int(row["world_size"])):
            run = _ddp_run(row, rank)
            for step, column in STEPS.items():
                measured = row[f"{column}_bytes_per_rank"][rank]
                predicted = sharded_peak(run, step=step).total
                errors.append((predicted / (measured - _ddp_unseen_frees(row, rank)) - 1, row["case_id"], rank, step))
                one = mm.peak_memory(run.replace(n_gpus=1, rank=0), step=step).total
                below_one_gpu += one / measured - 1 < -0.05
    assert len(errors) == 46
    assert all(abs(e) <= 0.02 for e, *_ in errors), errors
    assert sum(abs(e) <= 0.001 for e, *_ in errors) >= 38, errors
    assert below_one_gpu >= 41


def test_ddp_views_hold_the_buckets_from_the_forward_on():
    # Hand derivation, validation/measure.py's GPT-2 (tied head, vocabulary 1,000, hidden 64, 256 positions) in fp32
    # on 2 GPUs: the Reducer allocates its buckets when the model is wrapped, G = the gradients' bytes. Without views
    # every one-GPU moment gains G; with views the gradients are the buckets at every moment, so a forward moment
    # (no .grad yet under zero_grad(set_to_none=True)) gains G as well, and at the embeddings the moment holds the
    # buckets plus what is not yet in .grad: the head's contribution to the tied embedding (1,000 x 64 x 4 B) and the
    # embeddings' fresh gradients (wte 1,000 x 64 and wpe 256 x 64, 4 B each).
    row = DDP[DDP.case_id.str.startswith("gpt2/fp32")].iloc[0]
    run = _ddp_run(row, 0)
    G = mm.training_memory(run).gradients
    one = mm.peak_memory(run.replace(n_gpus=1))
    copies = sharded_peak(run.replace(gradient_as_bucket_view=False))
    views = sharded_peak(run.replace(gradient_as_bucket_view=True))
    for (phase, label, plain), (_, _, copy) in zip(one.moments, copies.moments):
        assert copy - plain == G, label
    for (phase, label, plain), (_, _, view), parts in zip(one.moments, views.moments, views.breakdown):
        if phase == "forward":
            assert view - plain == G, label
        if label.startswith("at the embeddings"):
            assert parts["gradients"] == G + 1000 * 64 * 4 + (1000 * 64 + 256 * 64) * 4
    assert views.resident == copies.resident == one.resident + G


def test_ddp_is_judged_on_its_modelled_peak():
    for _, row in DDP.iterrows():
        run = _ddp_run(row, 0)
        need = mm.requirement(run)
        assert need.basis == "peak" and need.bytes == sharded_peak(run).total, row["case_id"]
    # what the DDP peak does not model keeps the one-GPU peak with the buckets alive throughout
    accum = mm.Run("gpt2", n_gpus=2, seq_len=64, grad_accum_steps=2, precision="fp32")
    assert "gradient accumulation" in why_no_sharded_peak(accum)
    assert mm.requirement(accum).basis == "peak"
    # with views the buckets are alive from the forward on, which that peak does not place: bounded by the one-GPU
    # peak plus the buckets, the gradients' bytes (GPT-2's 124,439,808 parameters in fp32 at 4 B)
    views = mm.requirement(accum.replace(gradient_as_bucket_view=True))
    one = mm.peak_memory(accum.replace(n_gpus=1)).total
    assert views.basis == "upper bound" and views.bytes == one + 4 * 124_439_808 == mm.requirement(accum).bytes


@pytest.mark.parametrize("flag, views", [([], False), (["--gradient-as-bucket-view"], True)])
def test_the_command_line_answers_ddp_as_the_api(capsys, flag, views):
    from memmath import cli
    cli.main(["train", "gpt2", "--gpus", "2", "--seq", "512", "--json", "--gpu", "A100 80GB"] + flag)
    report = json.loads(capsys.readouterr().out)
    need = mm.requirement(mm.Run(model="gpt2", n_gpus=2, seq_len=512, gradient_as_bucket_view=views))
    assert need.basis == "peak" and report["verdict"]["required_bytes"] == need.bytes
