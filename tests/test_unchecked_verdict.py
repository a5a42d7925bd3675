"""No verdict on activations nobody checked: a model type whose record has no activation trace (traced=False) counts
its activations by the textbook model (Korthikanti et al. 2022), which is not checked against PyTorch for it, so
memmath judges only the floor under the step (every part but the activations): "does not fit" where even the floor
fails the card, else the verdict is refused by name (fits is None), with what would give the activations. The same
everywhere: the API, the command line's text, --json and exit status, the planner's searches and lesson 8.

LFM2 is traced along transformers' PyTorch path only (Run(mixer_kernels='torch')): a GPU run, whose mixer_kernels
default to causal-conv1d's CUDA kernels, counts its activations unchecked the same way, the reason naming
--mixer-kernels torch (the run that gets a verdict) where an untraced type's names --traced."""

from __future__ import annotations

import json

import pytest

import memmath as mm
from memmath.cli import main
from memmath.decision import VerdictRefused
from memmath.verdict import verdict_of

# LiquidAI/LFM2-1.2B: 1,170,340,608 parameters (its model card's count) in 148 tensors: the embedding and the final
# norm (embedding_norm, the head tied to the embedding), 10 short-convolution blocks of 8 tensors (operator_norm,
# ffn_norm, w1, w2, w3, conv.in_proj, conv.conv, conv.out_proj; conv_bias false) and 6 attention blocks of 11
# (operator_norm, ffn_norm, w1, w2, w3, q_proj, k_proj, v_proj, out_proj, q_layernorm, k_layernorm).
LFM2_PARAMS, LFM2_TENSORS = 1_170_340_608, 2 + 10 * 8 + 6 * 11
# The floor of pure bf16 with AdamW, full finetuning, by hand: weights 2 B x N, gradients 2 B x N, Adam's two
# moments 2 x 2 B x N and its 4-byte step per tensor (torch.optim.AdamW keeps `step` as a float32 tensor); no
# master copy, no fp32 accumulation buffer. 2,340,681,216 + 2,340,681,216 + 4,681,363,024 = 9,362,725,456 B, the
# three rows `memmath train lfm2-1.2b --batch 4 --seq 2048` prints.
LFM2_FLOOR = 2 * LFM2_PARAMS + 2 * LFM2_PARAMS + (2 * 2 * LFM2_PARAMS + 4 * LFM2_TENSORS)
LFM2_RUN = dict(batch_size=4, seq_len=2048)
LFM2_ARGS = ["train", "lfm2-1.2b", "--gpu", "RTX 4090", "--batch", "4", "--seq", "2048"]
# Qwen3-Next-80B-A3B (qwen3_next: its gated DeltaNet blocks run other kernels on CUDA than on the CPU, so a run on a
# GPU, whose default is the CUDA kernels, stays a floor): 79,674,391,296 parameters, the count tests/test_cli.py
# checks against the published config.
QWEN3_NEXT = "qwen3-next-80b-a3b"
QWEN3_NEXT_PARAMS = 79_674_391_296


def cli(capsys, *argv) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_the_floor_is_the_parts_without_activations_by_hand():
    assert LFM2_FLOOR == 9_362_725_456
    need = mm.requirement("lfm2-1.2b", **LFM2_RUN)
    assert need.basis == "floor" and need.refused and need.bytes == LFM2_FLOOR
    # the parts stay what they were: the table still shows the textbook activations, unjudged
    assert need.memory.activations > 0 and int(need.memory.total) == LFM2_FLOOR + int(need.memory.activations)
    assert "'lfm2'" in need.reason and "not checked against PyTorch" in need.reason
    assert f"{LFM2_FLOOR:,} B" in need.reason
    assert "--mixer-kernels torch" in need.reason and "causal-conv1d's kernels" in need.reason
    assert need.fix.startswith("--mixer-kernels torch")  # what gives a verdict: that setting, not the generic advice
    # but not where the PyTorch path would not be replayed either: LFM2's blocks place no Houlsby adapters
    adapters = mm.requirement("lfm2-1.2b", **dict(LFM2_RUN, method=mm.Adapters()))
    assert adapters.basis == "floor" and not adapters.fix.startswith("--mixer-kernels")
    assert adapters.fix == mm.decision.FALLBACK_FIX
    # the same run on transformers' PyTorch path gets the step's peak
    assert mm.requirement("lfm2-1.2b", mixer_kernels="torch", **LFM2_RUN).basis == "peak"


def test_a_floor_that_fits_is_no_verdict_never_fits():
    # An RTX 4090 (24,564 MiB, 426 MiB of CUDA context) holds the 9.36 GB floor and its 5% margin many times over;
    # whether it holds the activations is not known: before, "fits, with 5.14 GB to spare" on 10.81 GB of them.
    plan = mm.plan_training("lfm2-1.2b", "RTX 4090", **LFM2_RUN)
    assert plan.fits is None and plan.verdict.fits is None and plan.changes == () and plan.path == ()
    said = verdict_of(plan.requirement, "RTX 4090")
    assert said.fits is None and said.what_fails is None and "lfm2" in said.refusal
    assert "fits, with" not in said.sentence() and "no verdict" in said.sentence()
    assert said.spare == 24_564 * 2**20 - 426 * 2**20 - LFM2_FLOOR  # what the floor leaves for the activations


def test_a_floor_that_does_not_fit_is_does_not_fit():
    # Qwen3-Next-80B-A3B, full finetuning in pure bf16 with AdamW on one GPU: at least 8 B a parameter (weights,
    # gradients, two moments at 2 B), 637.4 GB, whatever the activations: more than an H100's 85.5 GB.
    plan = mm.plan_training(QWEN3_NEXT, "H100 80GB", seq_len=2048)
    assert plan.requirement.basis == "floor" and plan.requirement.bytes >= 8 * QWEN3_NEXT_PARAMS
    assert plan.fits is False and plan.verdict.what_fails == "the card"
    assert "short by at least" in plan.verdict.clause()


def test_the_command_line_refuses_the_verdict_with_exit_status_3(capsys):
    status, out, err = cli(capsys, *LFM2_ARGS)
    assert status == 3 and err == ""
    assert "no verdict" in out and "fits, with" not in out
    assert "Floor: all but the activations" in out and f"{LFM2_FLOOR:,}" in out
    assert "--mixer-kernels torch" in " ".join(out.split())
    with pytest.raises(SystemExit):  # documented: a refused verdict is not "does not fit"
        main(["train", "--help"])
    assert "3 no verdict" in " ".join(capsys.readouterr().out.split())


def test_the_json_says_fits_null_and_why(capsys):
    status, out, _ = cli(capsys, *LFM2_ARGS, "--json")
    report = json.loads(out)
    assert status == 3 and report["exit_status"] == 3
    assert report["verdict"]["fits"] is None and "'lfm2'" in report["verdict"]["refused"]
    assert report["required"]["basis"] == "floor" and report["required"]["bytes"] == LFM2_FLOOR
    assert report["changes"] is None and report["path_to_fit"] is None
    assert report["sum_of_parts"] == LFM2_FLOOR + report["parts"]["activations"]


def test_a_floor_that_does_not_fit_exits_1(capsys):
    status, out, _ = cli(capsys, "train", QWEN3_NEXT, "--gpu", "H100 80GB", "--seq", "2048")
    assert status == 1 and "does not fit: short by at least" in out and "fits, with" not in out
    assert "No change is judged" in out


@pytest.mark.parametrize("sharding", ["even", "fsdp2"])
def test_a_sharded_run_is_refused_not_bounded(capsys, sharding):
    # A model without a verdict over 8 GPUs with ZeRO-3 (or FSDP2): bounds.py's "safe upper bound" added transients
    # to the unchecked activations and said "fits, with 19.86 GB to spare" on an H100 (gpt-oss-20b, untraced then). Each
    # GPU's floor is its eighth of 8 B a parameter (9,959,298,912 parameters' worth) plus Adam's 4-byte steps, one
    # per tensor; FSDP2 pads each tensor's dim 0 to a multiple of the 8 ranks (under 0.001% more here).
    run = dict(seq_len=2048, n_gpus=8, zero_stage=3, sharding=sharding)
    need = mm.requirement(QWEN3_NEXT, **run)
    assert need.basis == "floor" and QWEN3_NEXT_PARAMS <= need.bytes < QWEN3_NEXT_PARAMS * 1.00001
    assert mm.plan_training(QWEN3_NEXT, "H100 80GB", **run).fits is None
    status, out, _ = cli(capsys, "train", QWEN3_NEXT, "--gpu", "H100 80GB", "--seq", "2048", "--gpus", "8",
                         "--zero", "3", "--sharding", sharding)
    assert status == 3 and "no verdict" in out and "fits, with" not in out


@pytest.mark.parametrize("search", [
    lambda: mm.planner.fewest_gpus_that_fit(QWEN3_NEXT, "H100 80GB", seq_len=2048, zero_stage=3),
    lambda: mm.planner.fewest_gpus_that_fit(QWEN3_NEXT, "H100 80GB", seq_len=2048, zero_stage=3, sharding="fsdp2",
                                            n_gpus=2),
    lambda: mm.planner.largest_batch_that_fits("lfm2-1.2b", "RTX 4090", seq_len=2048),
    lambda: mm.planner.longest_sequence_that_fits("lfm2-1.2b", "RTX 4090"),  # no seq_len given: every length is one
    lambda: mm.planner.plan_layout(QWEN3_NEXT, "H100 80GB", seq_len=2048),
    lambda: mm.planner.suggest_changes("lfm2-1.2b", "RTX 4090", **LFM2_RUN),
    lambda: mm.planner.path_to_fit(QWEN3_NEXT, "H100 80GB", seq_len=2048),
], ids=["fewest_gpus", "fewest_gpus_fsdp2", "largest_batch", "longest_sequence", "plan_layout", "suggest_changes",
        "path_to_fit"])
def test_the_searches_refuse_by_name(search):
    with pytest.raises(VerdictRefused, match="not checked against PyTorch") as refused:
        search()
    # LFM2 and Qwen3-Next are traced on transformers' PyTorch path of their mixers: the fix names the run setting that
    # takes it (a GPU's default runs the CUDA kernels)
    assert isinstance(refused.value, ValueError) and "--mixer-kernels torch" in str(refused.value)


def test_plan_layout_on_the_command_line_refuses_with_exit_status_3(capsys):
    status, out, err = cli(capsys, "train", QWEN3_NEXT, "--gpu", "H100 80GB", "--seq", "2048", "--plan-layout")
    assert status == 3 and out == "" and len(err.splitlines()) == 1 and "'qwen3_next'" in err


def test_a_traced_type_keeps_its_verdict(capsys):
    # llama-3-8b has an activation trace: its verdicts are judged as before (docs/cli.md's transcript and README)
    status, out, _ = cli(capsys, "train", "llama-3-8b", "--batch", "4", "--seq", "2048", "--gpu", "RTX 4090")
    assert status == 1 and "does not fit: short by" in out and "at least" not in out
    plan = mm.plan_training("llama-3-8b", "RTX 4090", method=mm.QLoRA(rank=8, targets=("q", "v")), batch_size=4,
                            seq_len=2048, checkpointing=True)
    assert plan.requirement.basis == "peak" and plan.fits is True
    # the textbook model chosen by name for a traced type counts what the blocks keep, not the step's peak: a floor and
    # no verdict, with what gives one
    chosen = mm.plan_training("llama-3-8b", "H100 80GB", method=mm.LoRA(), seq_len=512, activations="textbook")
    assert chosen.requirement.basis == "floor" and chosen.fits is None
    assert "asked for by name" in chosen.requirement.reason and "drop --activations textbook" in chosen.requirement.fix
    assert mm.planner.longest_sequence_that_fits("llama-3-8b", "H100 80GB", method=mm.LoRA()) > 0


def test_a_card_without_bf16_judges_the_recipe_instead_on_its_floor_too(capsys):
    # A T4 cannot run pure bf16; the fp16 mixed-precision run it would train instead keeps an fp32 master copy and
    # fp32 Adam states, 16 B a parameter and more before activations (18.7 GB for LFM2-1.2B), over a T4's 15.8 GB
    status, out, _ = cli(capsys, "train", "lfm2-1.2b", "--gpu", "T4", "--batch", "4", "--seq", "2048")
    plan = mm.plan_training("lfm2-1.2b", "T4", **LFM2_RUN)
    assert plan.recipe_instead.requirement.basis == "floor" and plan.recipe_instead.fits is False
    assert plan.recipe_instead.requirement.bytes >= 16 * LFM2_PARAMS
    assert status == 3 and "the floor under the step's peak" in " ".join(out.split())
    assert "short by at least" in " ".join(out.split()) and "fits, with" not in out
