"""Properties of the verdict (memmath.requirement), over small models and layouts (hypothesis): more tokens or a
larger batch never need less; more data-parallel GPUs never raise a GPU's share except by the buffers the engine
adds, each named; gradient accumulation never lowers a run's requirement; the API, the command line's JSON and the
planner give one number for one run."""

import contextlib
import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memmath as mm
from memmath.bounds import named_buffers
from memmath.cli import main

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def small_models(draw):
    """Small GPT-2, LLaMA and BERT shapes with whole heads, and a tiny mixture of experts."""
    kind = draw(st.sampled_from(["gpt2", "llama", "bert"]))
    layers = draw(st.sampled_from([2, 4]))
    heads = draw(st.sampled_from([2, 4]))
    hidden = heads * draw(st.sampled_from([8, 16]))
    vocab = draw(st.integers(50, 400))
    if kind == "gpt2":
        return mm.models.gpt2_model(n_layers=layers, hidden_size=hidden, n_heads=heads, vocab_size=vocab,
                                    max_positions=512)
    if kind == "bert":
        return mm.models.bert_model(n_layers=layers, hidden_size=hidden, n_heads=heads, vocab_size=vocab,
                                    max_positions=512)
    return mm.models.llama_model(n_layers=layers, hidden_size=hidden, n_heads=heads, n_kv_heads=heads // 2,
                                 intermediate_size=2 * hidden, vocab_size=vocab)


@st.composite
def runs(draw):
    """(model, settings) of one run: a method, a recipe, an optimizer, data parallelism with or without ZeRO."""
    model = draw(small_models())
    method = draw(st.sampled_from([mm.Full(), mm.LoRA(rank=4), mm.Freeze(trainable_layers=1)]))
    n_gpus = draw(st.sampled_from([1, 2, 4]))
    return model, dict(method=method, precision=draw(st.sampled_from(["bf16", "fp32", "mixed"])),
                       optimizer=draw(st.sampled_from(["sgd", "sgd_momentum", "adamw", "adam8bit"])),
                       n_gpus=n_gpus, zero_stage=draw(st.sampled_from([0, 1, 2, 3])) if n_gpus > 1 else 0,
                       checkpointing=draw(st.booleans()), attention=draw(st.sampled_from(["eager", "sdpa"])),
                       batch_size=draw(st.integers(1, 4)), seq_len=draw(st.sampled_from([16, 32, 64])))


@FAST
@given(runs(), st.integers(1, 3), st.sampled_from([16, 32, 64]))
def test_more_tokens_or_a_larger_batch_never_need_less(run, more_batch, more_tokens):
    model, kw = run
    need = mm.requirement(model, **kw).bytes
    assert mm.requirement(model, **{**kw, "batch_size": kw["batch_size"] + more_batch}).bytes >= need
    assert mm.requirement(model, **{**kw, "seq_len": kw["seq_len"] + more_tokens}).bytes >= need


@FAST
@given(runs(), st.sampled_from([2, 4, 8]))
def test_more_data_parallel_gpus_raise_a_gpus_share_only_by_the_engines_named_buffers(run, factor):
    model, kw = run
    fewer = mm.requirement(model, **kw)
    more_run = mm.Run(model, **{**kw, "n_gpus": kw["n_gpus"] * factor,
                                "zero_stage": kw["zero_stage"] if kw["n_gpus"] > 1 else 1})
    more = mm.requirement(more_run)
    buffers = named_buffers(more_run)
    assert more.bytes <= fewer.bytes + sum(buffers.values())
    if more.bytes > fewer.bytes:  # every buffer that raised it is named, in the reason or the notes
        said = " ".join([more.reason, *map(str, more.memory.notes), *map(str, more.peak.notes if more.peak else ())])
        assert buffers and all(name.split(" (")[0] in said for name, value in buffers.items() if value)


@pytest.mark.parametrize("layout", [dict(n_gpus=2, tp=2), dict(n_gpus=2, pp=2), dict(n_gpus=4, pp=2, tp=2)])
def test_data_parallel_copies_of_a_split_run_with_zero_add_only_named_buffers(layout):
    model = mm.models.llama_model(n_layers=4, hidden_size=64, n_heads=4, n_kv_heads=2, intermediate_size=128,
                                  vocab_size=300)
    for stage in (1, 2, 3):
        fewer = mm.requirement(model, seq_len=64, batch_size=2, zero_stage=stage, **layout)
        more_run = mm.Run(model, seq_len=64, batch_size=2, zero_stage=stage, **{**layout,
                                                                                 "n_gpus": 2 * layout["n_gpus"]})
        assert mm.requirement(more_run).bytes <= fewer.bytes + sum(named_buffers(more_run).values())


@FAST
@given(runs(), st.integers(2, 4))
def test_gradient_accumulation_never_lowers_a_runs_requirement(run, steps):
    model, kw = run
    assert mm.requirement(model, **kw, grad_accum_steps=steps).bytes >= mm.requirement(model, **kw).bytes


@pytest.mark.parametrize("layout", [dict(n_gpus=2, pp=2), dict(n_gpus=4, pp=2, micro_batches=4),
                                    dict(n_gpus=2, tp=2), dict(n_gpus=2, pp=2, zero_stage=0, pp_schedule="gpipe",
                                                               micro_batches=2)])
def test_gradient_accumulation_never_lowers_a_split_runs_requirement(layout):
    model = mm.models.llama_model(n_layers=4, hidden_size=64, n_heads=4, n_kv_heads=2, intermediate_size=128,
                                  vocab_size=300)
    for steps in (2, 3):
        assert mm.requirement(model, seq_len=64, **layout, grad_accum_steps=steps).bytes >= \
            mm.requirement(model, seq_len=64, **layout).bytes


def _cli_json(*args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = main(["train", *args, "--json"])
    assert status in (0, 1)
    return json.loads(out.getvalue())


@pytest.mark.parametrize("args, settings", [
    (["gpt2", "--seq", "256", "--gpu", "T4"], dict(seq_len=256)),
    (["gpt2", "--seq", "256", "--gpus", "2", "--zero-stage", "2", "--gpu", "T4"],
     dict(seq_len=256, n_gpus=2, zero_stage=2)),
    (["llama-2-7b", "--seq", "512", "--gpus", "2", "--pp", "2", "--grad-accum", "2", "--gpu", "RTX 5090"],
     dict(seq_len=512, n_gpus=2, pp=2, grad_accum_steps=2)),
    (["llama-2-7b", "--seq", "512", "--gpus", "4", "--tp", "2", "--zero-stage", "1", "--gpu", "H100 80GB"],
     dict(seq_len=512, n_gpus=4, tp=2, zero_stage=1)),
])
def test_the_api_the_command_lines_json_and_the_planner_give_one_number(args, settings):
    report = _cli_json(*args)
    run = mm.Run(args[0], attention="sdpa", **settings)  # the command line plans fused attention unless told
    assert report["run"] == repr(run)
    need = mm.requirement(run)
    plan = mm.plan_training(run, args[args.index("--gpu") + 1])
    assert report["required"]["bytes"] == need.bytes == plan.requirement.bytes
    assert report["required"]["basis"] == need.basis.replace(" ", "_") == plan.requirement.basis.replace(" ", "_")
    assert report["required"]["rank"] == need.rank
    assert report["parts"] == {k: int(v) for k, v in need.memory.parts().items()}
    assert report["verdict"]["fits"] == plan.fits


@pytest.mark.parametrize("layout", [dict(n_gpus=2, pp=2), dict(n_gpus=2, tp=2), dict(n_gpus=4, tp=2, zero_stage=3),
                                    dict(n_gpus=4, pp=2, micro_batches=2, zero_stage=1)])
def test_a_split_run_never_needs_less_for_more_tokens_or_a_larger_batch(layout):
    model = mm.models.llama_model(n_layers=4, hidden_size=64, n_heads=4, n_kv_heads=2, intermediate_size=128,
                                  vocab_size=300)
    needs = [mm.requirement(model, seq_len=s, batch_size=b, **layout).bytes for s, b in ((32, 1), (64, 1), (64, 2))]
    assert needs == sorted(needs)
