"""Lesson 11, many GPUs: its numbers are the command line's for the same run, its problems derived again by hand,
the Ultra-Scale Playbook widget's preset recomputed by hand from the widget's formulas, every control at its ends."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from types import SimpleNamespace

import marimo as mo
import pytest

import lessons
from memmath import cli

LESSON = "11_many_gpus"
GB = 10**9
# meta-llama/Meta-Llama-3-70B's config.json: 70,553,706,496 parameters (transformers' own count of LlamaForCausalLM).
LLAMA3_70B_PARAMS = 70_553_706_496


def _cli(*args):
    """`memmath <args> --json` in this process: (exit status, the JSON)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main([*args, "--json"])
    return status, json.loads(out.getvalue())


def _gb(nbytes) -> str:
    return f"{nbytes / GB:,.2f} GB"


@pytest.fixture(scope="module")
def default_run():
    outputs, defs = lessons.run(LESSON)
    return outputs, defs, lessons.plain_text(outputs)


def test_the_opening_numbers_are_the_command_lines(default_run):
    _, _, page = default_run
    _, one = _cli("train", "llama-3-70b", "--gpu", "H100 80GB")
    assert f"must hold {_gb(one['verdict']['required_bytes'])} at its step's peak" in page
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(["train", "llama-3-70b", "--gpu", "H100 80GB", "--plan-layout"])
    printed = out.getvalue()
    assert "16 GPUs, 1 data x 8 tensor x 2 pipeline" in printed
    total = next(line for line in printed.splitlines() if line.strip().startswith("The card must hold (peak)"))
    said = re.search(r"\(\s*1 data x 8 tensor x 2 pipeline\s*, 16 GPUs\) leaves ([\d.,]+ GB)\s+at the step's peak",
                     page)
    assert said and said.group(1) == f"{float(total.split()[-1]):.2f} GB"


# Each row of "what each axis splits" against `memmath train llama-3-70b` with the same degrees on 8 GPUs.
AXIS_ARGS = {"1 GPU": [], "data x 8": ["--gpus", "8"], "data x 8, ZeRO-1": ["--gpus", "8", "--zero-stage", "1"],
             "data x 8, ZeRO-2": ["--gpus", "8", "--zero-stage", "2"],
             "data x 8, ZeRO-3": ["--gpus", "8", "--zero-stage", "3"], "tensor x 8": ["--gpus", "8", "--tp", "8"],
             "tensor x 8 + sequence parallel": ["--gpus", "8", "--tp", "8", "--sequence-parallel"],
             "pipeline x 8 (1F1B, 8 micro-batches)": ["--gpus", "8", "--pp", "8", "--micro-batches", "8"]}


def test_each_axis_row_is_the_command_lines(default_run):
    _, defs, _ = default_run
    table = defs["axis_frame"].set_index("layout")
    assert list(table.index) == list(AXIS_ARGS)
    for label, args in AXIS_ARGS.items():
        _, report = _cli("train", "llama-3-70b", *args, "--gpu", "H100 80GB")
        row, parts = table.loc[label], report["parts"]
        assert row["the card must hold (GB)"] == round(report["verdict"]["required_bytes"] / GB, 2), label
        assert row["weights (GB)"] == round(parts["weights"] / GB, 2), label
        assert row["activations (GB)"] == round(parts["activations"] / GB, 2), label
        # One basis for comparisons: every row's sum of the parts, and which number the card is judged on.
        assert row["sum of the parts (GB)"] == round(report["sum_of_parts"] / GB, 2), label
        assert row["judged on"] == {"peak": "peak", "upper_bound": "bound", "sum_of_parts": "sum"}[
            report["required"]["basis"]], label


def test_what_zero_and_tensor_parallelism_split_by_hand(default_run):
    _, defs, _ = default_run
    table = defs["axis_frame"].set_index("layout")
    weights = LLAMA3_70B_PARAMS * 2  # pure bf16: 2 B a weight
    assert table.loc["1 GPU", "weights (GB)"] == round(weights / GB, 2) == 141.11
    # ZeRO-3 over 8: 141,107,412,992 B / 8 = 17,638,426,624 B. ZeRO-1 and 2 keep every weight on every GPU.
    assert table.loc["data x 8, ZeRO-3", "weights (GB)"] == round(weights / 8 / GB, 2) == 17.64
    assert table.loc["data x 8, ZeRO-2", "weights (GB)"] == table.loc["data x 8", "weights (GB)"] == 141.11
    # Tensor parallelism splits every matrix by 8 (the norms, 2 x 80 + 1 of 8,192 each, stay whole: 0.003 GB).
    assert table.loc["tensor x 8", "weights (GB)"] == 17.64
    # ZeRO never splits activations; sequence parallelism takes activations off on top of tensor parallelism.
    one = table.loc["1 GPU", "activations (GB)"]
    assert all(table.loc[k, "activations (GB)"] == one for k in AXIS_ARGS if k.startswith("data"))
    assert table.loc["tensor x 8 + sequence parallel", "activations (GB)"] < table.loc["tensor x 8", "activations (GB)"]


LAYOUTS = [
    pytest.param(dict(tp="8", pp="2", micro=2), ["--gpus", "16", "--tp", "8", "--pp", "2", "--micro-batches", "2"],
                 id="defaults: 8 tensor x 2 pipeline"),
    pytest.param(dict(tp="4", pp="4", micro=8, schedule="GPipe"),
                 ["--gpus", "16", "--tp", "4", "--pp", "4", "--micro-batches", "8", "--pp-schedule", "gpipe"],
                 id="4 x 4, GPipe, 8 micro-batches"),
    pytest.param(dict(tp="8", pp="1", dp=4, zero="1"), ["--gpus", "32", "--tp", "8", "--zero-stage", "1"],
                 id="4 data x 8 tensor, ZeRO-1"),
    pytest.param(dict(model="Mixtral-8x7B (8 experts)", tp="2", pp="1", dp=4, ep="4", gpu="A100 80GB"),
                 ["--gpus", "8", "--tp", "2", "--ep", "4"], id="Mixtral: 4 data x 2 tensor, 4 expert"),
]


def _run_layout(model="Llama-3-70B", tp="8", pp="2", dp=1, micro=2, zero="0", ep="1", schedule="1F1B",
                gpu="H100 80GB"):
    models = {"Llama-3-70B": "llama-3-70b", "Llama-3-8B": "llama-3-8b", "Mixtral-8x7B (8 experts)": "mixtral-8x7b",
              "Qwen3-30B-A3B (128 experts)": "qwen3-30b-a3b"}
    degrees = {"1": 1, "2": 2, "4": 4, "8": 8}
    outputs, defs = lessons.run_with(
        LESSON, model_dropdown=mo.ui.dropdown(options=models, value=model),
        tp_dropdown=mo.ui.dropdown(options=degrees, value=tp), pp_dropdown=mo.ui.dropdown(options=degrees, value=pp),
        dp_slider=mo.ui.slider(steps=[1, 2, 4, 8, 16, 32, 64], value=dp),
        micro_slider=mo.ui.slider(steps=[1, 2, 4, 8, 16, 32], value=micro),
        zero_radio=mo.ui.radio(options={"0": 0, "1": 1, "2": 2, "3": 3}, value=zero),
        ep_dropdown=mo.ui.dropdown(options=degrees, value=ep),
        schedule_dropdown=mo.ui.dropdown(options={"1F1B": ("1f1b", 1), "GPipe": ("gpipe", 1),
                                                  "Interleaved 1F1B, 2 stages a GPU": ("interleaved", 2)},
                                         value=schedule),
        gpu_dropdown=mo.ui.dropdown(options=[gpu], value=gpu))
    return defs, lessons.plain_text(outputs), models[model]


@pytest.mark.parametrize("state, args", LAYOUTS)
def test_a_layout_is_the_command_lines(state, args):
    defs, page, model = _run_layout(**state)
    gpu = state.get("gpu", "H100 80GB")
    status, report = _cli("train", model, *args, "--gpu", gpu)
    verdict = report["verdict"]
    assert defs["layout_error"] is None
    assert defs["layout_need"].bytes == verdict["required_bytes"]
    assert f"**{_gb(verdict['required_bytes'])}**" not in page  # markdown is rendered, not shown
    assert _gb(verdict["required_bytes"]) in page
    assert ("the run fits" in page) == verdict["fits"] == (status == 0)
    # The page's command is one the command line takes, and it asks about this run.
    command = defs["layout_command"]
    assert command in page
    words = shlex.split(command)
    assert words[:2] == ["memmath", "train"]
    _, again = _cli(*words[1:])
    assert again["verdict"]["required_bytes"] == verdict["required_bytes"]


def test_the_pipeline_sentence_by_hand():
    # 4 stages, 8 micro-batches, GPipe: every forward first, so stage 0 keeps all 8; bubble (p - 1) / (m + p - 1)
    # = 3 / 11 = 27% (Huang et al. 2019, GPipe; Narayanan et al. 2021).
    _, page, _ = _run_layout(tp="4", pp="4", micro=8, schedule="GPipe")
    assert "GPipe schedule keeps 8 of 8 micro-batches' activations on that stage and idles 27% of the step" in page
    _, page, _ = _run_layout(tp="4", pp="4", micro=8)
    assert "1F1B schedule keeps 4 of 8 micro-batches' activations" in page  # min(m, p - stage) on stage 0
    # Interleaved, 2 stages a GPU (torch's ScheduleInterleaved1F1B): r = max(1, m // p) = 2 rounds of m/r = 4, so
    # GPU 0 runs (v - 1) x m/r + 2 (p - 1) = 4 + 6 = 10 warm-up forwards of its 16 micro-batch stages, then a forward
    # (11 alive) and a backward by turns: at most 11 at once; bubble 3 / (2 x 8 + 3) = 3 / 19.
    _, page, _ = _run_layout(tp="4", pp="4", micro=8, schedule="Interleaved 1F1B, 2 stages a GPU")
    assert "GPU 0 keeps up to 11 micro-batch stages' activations at once (of 8 micro-batches x 2 stages, each " \
           "stage 1/2 of the GPU's blocks)" in page
    assert "the bubble shrinks to 16% of the step" in page  # 3 / 19 = 15.8%


def test_the_sentence_speaks_of_the_gpu_the_verdict_judges():
    # Llama-3-70B, 2 stages, 1F1B, 2 micro-batches: the last stage (the head, the loss and every micro-batch's logits)
    # needs the most; 1F1B keeps min(m, p - stage) = min(2, 2 - 1) = 1 micro-batch there, not the first stage's 2.
    _, page, _ = _run_layout(tp="1", pp="2", micro=2)
    assert "the GPU of stage 1 (rank 1) needs the most" in page
    assert "The 1F1B schedule keeps 1 of 2 micro-batches' activations on that stage" in page


def test_a_layout_that_cannot_run_says_why_and_names_the_field():
    # Expert parallelism on a dense model: memmath refuses it by name; the page shows that, not a traceback.
    defs, page, _ = _run_layout(tp="8", pp="1", ep="2")
    assert defs["layout_error"] and "ep" in defs["layout_error"]
    assert "This layout cannot run: " in page and "Traceback" not in page


def test_the_playbook_widgets_preset_by_hand(default_run):
    _, _, page = default_run
    # The widget's "Llama 3 70B" preset (a 64, b 32, h 8,192, h_ff 32,768, L 80, s 256, v 30,522, t 8, d 8, ZeRO-1,
    # mixed precision, no recomputation, SwiGLU), through its paramGradsOpt and activationMemory by hand:
    h, L, s, v, b, a, h_ff, t, d = 8192, 80, 256, 30522, 32, 64, 32768, 8, 8
    n = h * (v + s) + L * (12 * h * h + 13 * h) + 2 * h
    assert n == 64_685_178_880
    params = grads = 2 * n  # not divided: ZeRO-1, and no t in paramGradsOpt
    states = (8 + 4) * n // d  # k = 8, + 4 for the fp32 master copy, sharded over d by ZeRO-1
    sbh = s * b * h
    attention = sbh * (2 * 4 // t + 2 + 1) + (2 * 2 + 1) * a * s * s * b // t
    feedforward = sbh * 2 + s * b * h_ff * 2 // t + s * b * h_ff * 2 * 3 // t + sbh
    per_layer = attention + feedforward + 2 * (sbh * 2)
    activations = L * per_layer + sbh + sbh * 2 + sbh * 2 + s * b * v * 4
    total = params + grads + states + activations
    assert total == 444_345_696_256
    assert f"give {_gb(total)} per GPU" in page
    assert f"{total / 1024**3:.2f} \"GB\" (GiB)" in page  # 413.83: the widget divides by 1024^3 and prints GB
    assert f"counts {n:,} parameters" in page


def test_the_problems_by_hand(default_run):
    _, _, page = default_run
    # 1. 70,553,706,496 x 2 B / 8 = 17,638,426,624 B.
    assert "70,553,706,496 x 2 B / 8 = 17,638,426,624 B = 17.64 GB" in page
    # 2. GPipe keeps all 8 micro-batches on stage 0, 1F1B p = 4; 3 / 11 = 27%.
    assert "GPipe runs all 8 forwards first: 8. 1F1B starts backwards once the pipeline is full: 4" in page
    assert "3 / 11 = 27%" in page
    # 3. The layout the command line's --plan-layout prints, and what it says the card must hold.
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(["train", "llama-3-70b", "--gpu", "H100 80GB", "--plan-layout"])
    must = next(line for line in out.getvalue().splitlines() if "The card must hold (peak)" in line).split()[-1]
    assert f"16 GPUs, 1 data x 8 tensor x 2 pipeline: the GPU that needs the most must hold {float(must):.2f} GB at " \
           "its step's peak" in page


def test_the_fewest_gpus_button(default_run):
    _, _, page = default_run
    assert "Press the button to search." in page
    outputs, _ = lessons.run_with(LESSON, fewest_button=SimpleNamespace(value=True))
    pressed = lessons.plain_text(outputs)
    assert "16 GPUs: 1 data x 8 tensor x 2 pipeline, 2 micro-batches" in pressed and "tp = 8: tensor parallelism" in pressed
    # Rendered as prose and a list, not as a code block (an indented markdown block was shown as code once).
    import html

    raw = lessons.output_text(outputs)
    for _ in range(3):  # the callout's HTML sits escaped in an attribute, inside a JSON string
        raw = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), html.unescape(raw))
    assert "<li>dp = 1: data parallelism" in raw
    assert "**16 GPUs" not in pressed


def test_the_fewest_gpus_tries_fewer_micro_batches_than_stages():
    # Llama-3-70B at 1 x 2,048 on an RTX 3060 (12,288 MiB less its Ampere GA10x context, 256 MiB measured on an RTX
    # 3090 by invoke-ai/InvokeAI issue 9413, = 12,616,466,432 B usable): with
    # p micro-batches 1F1B keeps p in flight on the first stage and no layout fits; with fewer, t = 8 x p = 16 does.
    import memmath as mm

    usable = 12288 * 2**20 - 256 * 2**20
    one = mm.Run("llama-3-70b", batch_size=1, seq_len=2048, n_gpus=128, tp=8, pp=16, micro_batches=1)
    assert mm.requirement(one).bytes * 1.05 <= usable  # memmath's own requirement: the layout fits at m = 1
    outputs, _ = lessons.run_with(LESSON, fewest_button=SimpleNamespace(value=True),
                                  gpu_dropdown=mo.ui.dropdown(list(mm.GPUS), value="RTX 3060"))
    pressed = lessons.plain_text(outputs)
    plan = mm.planner.plan_layout("llama-3-70b", "RTX 3060", batch_size=1, seq_len=2048)
    assert plan.fits and plan.layout.n_gpus <= 128 and plan.run.micro_batches < plan.layout.pp
    assert mm.requirement(plan.run).bytes + -(-mm.requirement(plan.run).bytes * 5 // 100) <= usable
    assert f"{plan.layout.n_gpus} GPUs: {plan.layout.describe()}, {plan.run.micro_batches} micro-batch" in pressed
    assert "No layout" not in pressed


def test_every_control_at_its_extremes():
    seen = set()
    for control, which, outputs, defs in lessons.extreme_runs(LESSON):
        seen.add(control)
        assert lessons.bad_text(outputs) == [], (control, which)
        page = lessons.plain_text(outputs)
        assert ("This layout cannot run: " in page) != (defs["layout_need"] is not None), (control, which)
    assert {"tp_dropdown", "pp_dropdown", "dp_slider", "cp_dropdown", "ep_dropdown", "zero_radio", "micro_slider",
            "seq_slider", "batch_slider", "gpu_dropdown", "model_dropdown"} <= seen


@pytest.mark.parametrize("tp, pp", [(1, 1), (8, 1), (8, 2), (4, 4), (2, 8)])
def test_the_static_charts_grid_is_the_command_lines(tp, pp):
    # The static site's chart (its own inputs work where the marimo controls are frozen) embeds its grid as CSV.
    import pandas as pd

    from memmath_lessons import site_charts

    spec = json.loads(site_charts.many_gpus_grid().spec)
    grid = next(pd.read_csv(io.StringIO(text)) for text in spec["datasets"].values() if text.startswith("tp,pp"))
    rows = grid[(grid["tp"] == tp) & (grid["pp"] == pp)]
    args = ["--gpus", str(tp * pp), "--tp", str(tp), "--pp", str(pp), "--micro-batches", str(pp)]
    _, report = _cli("train", "llama-3-70b", *args, "--gpu", "H100 80GB")
    required = report["verdict"]["required_bytes"]
    assert set(rows["total"]) == {round(required / GB, 2)}
    # Its segments add to what the card must hold, or, where the step's peak is below the parts (not all alive at
    # once), to the parts of that GPU and its buffers, as the command line lists them (within the rounding of each
    # segment to 0.01 GB).
    parts = sum(report["parts"][p] for p in ("weights", "gradients", "optimizer_states", "activations"))
    parts += sum(report["buffers"].values())
    assert abs(rows["GB"].sum() - max(required, parts) / GB) <= 0.005 * len(rows) + 1e-9
