"""One run, one answer: the Python API, the command line's --json and lesson 8 give the same bytes for a run.

For a grid of runs (presets built in code and read from config fields, a config.json read from a file; full
finetuning, freezing, adapters, LoRA, QLoRA; pure bf16, AMP and mixed precision; ZeRO-3; checkpointing on and
off), each entry point is given only what the grid sets, every other setting left to its own defaults; the
parts, what the card must hold (memmath.requirement: the peak where modelled, else the sum), the verdict and the
planner's changes must agree to the byte. Any default that drifts between them fails here. Lesson 8's own
figures are held to the same number: its part table (the parts, then what the step's peak adds) adds to
memmath.requirement, its chart's bars and ticks are each run's and each change's requirement, and on a card
without bf16 its one verdict names the run it would train instead with the command line's figures.
"""

from __future__ import annotations

import contextlib
import io
import json

import marimo as mo
import pytest

import lessons
import memmath as mm
from memmath import cli
from validation.published_configs import PUBLISHED_CONFIGS

LESSON = "08_planner"
TARGETS = {("q", "v"): "q, v", ("q", "k", "v", "o"): "q, k, v, o", ("all",): "all linear"}

# Each run: the model, then only the settings the run names (each entry point gets exactly these).
GRID = {
    "gpt2, code-built preset, full, b8 x 512": dict(model="gpt2", batch=8, seq=512, gpu="T4"),
    "llama-2-7b, code-built, LoRA r16 on every linear layer, checkpointing": dict(
        model="llama-2-7b", method="lora", rank=16, targets=("all",), seq=1024, checkpointing=True, gpu="RTX 4090"),
    "llama-3-8b, QLoRA r8 on q, v, b4 x 2048, checkpointing": dict(
        model="llama-3-8b", method="qlora", rank=8, targets=("q", "v"), batch=4, seq=2048, checkpointing=True,
        gpu="RTX 4090"),
    "mistral-7b, freeze all but 2 blocks": dict(model="mistral-7b", method="freeze", layers=2, seq=512,
                                                gpu="A100 80GB"),
    "Qwen2.5-0.5B from a config.json file, AMP": dict(model="file:Qwen2.5-0.5B", precision="amp", seq=256, gpu="T4"),
    "bert-base-uncased, ZeRO-3 on 4 GPUs, b16 x 128": dict(model="bert-base-uncased", batch=16, seq=128, gpus=4,
                                                           zero=3, gpu="RTX 4090"),
    "gemma-2-2b (eager by default), LoRA r8 on q, k, v, o": dict(
        model="gemma-2-2b", method="lora", rank=8, targets=("q", "k", "v", "o"), seq=512, gpu="H100 80GB"),
    "phi-3-mini, QLoRA on every linear layer, checkpointing": dict(
        model="phi-3-mini", method="qlora", rank=16, targets=("all",), seq=1024, checkpointing=True, gpu="RTX 4090"),
    "mixtral-8x7b, QLoRA r8 on q, v": dict(model="mixtral-8x7b", method="qlora", rank=8, targets=("q", "v"), seq=512,
                                        gpu="H100 80GB"),
    "qwen3-0.6b, Houlsby adapters": dict(model="qwen3-0.6b", method="adapters", seq=512, gpu="T4"),
    "llama-2-13b, mixed precision on 2 GPUs without ZeRO": dict(model="llama-2-13b", precision="mixed", seq=512,
                                                                  gpus=2, gpu="H100 80GB"),
    "llama-2-7b, QLoRA r8 on q, v on a V100 (no bf16: it would fit)": dict(
        model="llama-2-7b", method="qlora", rank=8, targets=("q", "v"), seq=512, gpu="V100 32GB"),
}


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("configs") / "config.json"
    path.write_text(json.dumps(PUBLISHED_CONFIGS["Qwen2.5-0.5B"]))
    return path


@pytest.fixture(scope="module")
def lesson_base():
    app = lessons.load_app(LESSON)
    _, defs = app.run()
    return lessons._cell_defs(app), defs


def _method(case):
    kind = case.get("method", "full")
    targets = case.get("targets")  # ("all",) is every linear layer, as LoRA reads it
    return {"full": mm.Full(), "freeze": lambda: mm.Freeze(trainable_layers=case["layers"]),
            "adapters": mm.Adapters(), "lora": lambda: mm.LoRA(rank=case["rank"], targets=targets),
            "qlora": lambda: mm.QLoRA(rank=case["rank"], targets=targets)}[kind]


def _model(case, config_file):
    name = case["model"]
    return str(config_file) if name.startswith("file:") else name


def _api(case, config_file):
    """The Python API, given only the grid's settings."""
    model = _model(case, config_file)
    shape = mm.from_hf_config(model) if model.endswith(".json") else model
    method = _method(case)
    settings = {"method": method() if callable(method) else method, "seq_len": case["seq"]}
    for key, name in (("batch", "batch_size"), ("precision", "precision"), ("checkpointing", "checkpointing"),
                      ("gpus", "n_gpus"), ("zero", "zero_stage")):
        if key in case:
            settings[name] = case[key]
    return mm.plan_training(shape, case["gpu"], **settings)


def _cli(case, config_file):
    """The command line's --json, given only the grid's options (run in this process, as `memmath` runs main)."""
    args = ["train", _model(case, config_file), "--seq", str(case["seq"]), "--gpu", case["gpu"], "--json"]
    if case.get("method", "full") != "full":
        args += ["--method", case["method"]]
    if "rank" in case:
        args += ["--rank", str(case["rank"]), "--targets", ",".join(case["targets"])]
    if "layers" in case:
        args += ["--trainable-layers", str(case["layers"])]
    for key, option in (("batch", "--batch"), ("precision", "--precision"), ("gpus", "--gpus"),
                        ("zero", "--zero-stage")):
        if key in case:
            args += [option, str(case[key])]
    if case.get("checkpointing"):
        args.append("--checkpointing")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(args)
    return status, json.loads(out.getvalue())


def _lesson(case, config_file, lesson_base):
    """Lesson 8 through app.run, its controls set to the grid's settings, every other control at its default."""
    owners, base = lesson_base
    controls = {"seq_len_slider": mo.ui.slider(steps=[2**k for k in range(7, 16)], value=case["seq"]),
                "gpu_dropdown": mo.ui.dropdown(list(mm.GPUS), value=case["gpu"]),
                "method_dropdown": mo.ui.dropdown({"full": "full", "freeze": "freeze", "adapters": "adapters",
                                                   "lora": "lora", "qlora": "qlora"},
                                                  value=case.get("method", "full"))}
    name = case["model"]
    if name.startswith("file:"):
        controls["source_radio"] = mo.ui.radio(["preset", "paste config.json"], value="paste config.json")
        controls["config_text_area"] = mo.ui.text_area(value=config_file.read_text())
    else:
        controls["preset_dropdown"] = mo.ui.dropdown(list(mm.PRESETS), value=name)
    if "rank" in case:
        controls["rank_slider"] = mo.ui.slider(steps=[2**k for k in range(0, 9)], value=case["rank"])
        controls["targets_dropdown"] = mo.ui.dropdown({v: k for k, v in TARGETS.items()}, value=TARGETS[case["targets"]])
    if "layers" in case:
        controls["get_trainable_layers"] = mo.state(case["layers"])[0]
    if "batch" in case:
        controls["batch_slider"] = mo.ui.slider(steps=[2**k for k in range(0, 9)], value=case["batch"])
    if "precision" in case:
        controls["precision_dropdown"] = mo.ui.dropdown(list(mm.RECIPES), value=case["precision"])
    if "checkpointing" in case:
        controls["checkpointing_switch"] = mo.ui.switch(value=case["checkpointing"])
    if "gpus" in case:
        controls["n_gpus_number"] = mo.ui.number(start=1, stop=1024, value=case["gpus"])
    if "zero" in case:
        controls["zero_stage_radio"] = mo.ui.radio({"0 (none)": 0, "1": 1, "2": 2, "3": 3}, value=str(case["zero"]))
    overrides = {}
    for var in controls:
        overrides.update({v: base[v] for v in owners[var] if v in base})
    overrides.update(controls)
    outputs, defs = lessons.load_app(LESSON).run(defs=overrides)
    return defs, lessons.plain_text(outputs)  # its names, and what the page shows as words


@pytest.mark.parametrize("name", GRID)
def test_the_api_the_command_line_and_lesson_8_give_one_answer(name, config_file, lesson_base):
    case = GRID[name]
    api = _api(case, config_file)
    status, report = _cli(case, config_file)
    lesson, shown = _lesson(case, config_file, lesson_base)
    plan = lesson["plan"]

    # One run: every concrete setting the same, defaults included.
    assert report["run"] == repr(api.run).replace(repr(api.run.model.name), repr(report["model"]["name"]))
    assert plan.run == api.run or (case["model"].startswith("file:") and plan.run.settings() == api.run.settings())
    # The parts, to the byte.
    parts = {k: int(v) for k, v in api.memory.parts().items()}
    assert report["parts"] == parts == {k: int(v) for k, v in plan.memory.parts().items()}
    # What the card must hold: one decision, one number, one basis.
    need = api.requirement
    assert report["required"]["bytes"] == need.bytes == plan.requirement.bytes
    assert report["required"]["basis"] == need.basis.replace(" ", "_") and plan.requirement.basis == need.basis
    assert (report["peak"] is None) == (need.peak is None)
    if need.basis == "sum of parts":
        assert need.bytes == api.memory.total and need.reason
    # The verdict, on the same card with the same reserve and margin.
    assert report["verdict"]["fits"] == api.fits == plan.fit.fits == lesson["fit"].fits
    assert report["verdict"]["available_bytes"] == api.fit.available_bytes == plan.fit.available_bytes
    assert status == (0 if api.fits else 1)
    # The planner's changes: the same changes, each judged on the same requirement.
    if not api.fits:
        assert [(c["change"], c["required_bytes"], c["fits"]) for c in report["changes"]] == \
            [(s.change, s.total, s.fits) for s in api.changes] == [(s.change, s.total, s.fits) for s in plan.changes]
        for change in api.changes:
            assert change.total == mm.requirement(change.run).bytes
    _lesson_figures_are_the_requirement(lesson, shown, api)
    # A card without the recipe's arithmetic (pure bf16 on a T4 or V100): one warning, the same everywhere.
    assert (report["cannot_run"] is None) == (api.cannot_run is None) == (lesson["instead_fit"] is None)
    if api.cannot_run is not None:
        instead = mm.requirement(api.run.replace(precision=api.cannot_run.instead))
        other = report["cannot_run_instead"]
        assert other["precision"] == api.cannot_run.instead and other["required_bytes"] == instead.bytes
        assert other["basis"] == instead.basis.replace(" ", "_")
        assert (other["fits"], other["headroom_bytes"]) == (lesson["instead_fit"].fits, lesson["instead_fit"].headroom_bytes)
        assert lesson["instead_fit"].required_bytes == instead.bytes
    else:
        assert report["cannot_run_instead"] is None


def _lesson_figures_are_the_requirement(lesson, shown, api):
    """Lesson 8's part table, chart bars and chart ticks against memmath.requirement for the same runs."""
    need = api.requirement
    parts = {k: int(v) for k, v in api.memory.parts().items() if int(v)}
    # The table: every part to the byte, then (where the basis is the peak) their sum and the peak minus the sum,
    # and last what the card must hold, the requirement; the rows add to it.
    frame = lesson["parts_frame"]
    rows = list(zip(frame["part"], frame["bytes"]))
    # ... as the page shows it: the requirement's row, to the byte, and the verdict's figure.
    assert f"What the card must hold: {rows[-1][0].split(': ', 1)[1]} {need.bytes:,} " in shown
    assert f"{mm.format_bytes(need.bytes)} on the GPU" in shown or f"{mm.format_bytes(need.bytes)} per GPU" in \
        shown
    assert [b for _, b in rows[:len(parts)]] == list(parts.values())
    assert rows[-1][1] == need.bytes
    if need.basis in ("peak", "upper bound"):  # what the peak (or the bound on it) adds above the parts
        assert rows[len(parts)] == ("Sum of the parts", int(api.memory.total)) and len(rows) == len(parts) + 3
        assert rows[-2][1] == need.bytes - int(api.memory.total)
    else:
        assert len(rows) == len(parts) + 1 and need.bytes == int(api.memory.total)
    # The live chart: each bar's parts are its run's, plus what its peak adds above the sum; each tick is the
    # requirement, for the run and for each change it draws (the changes table's totals).
    bars, ticks = {}, {}
    for row in (r for rows in lesson["bars_chart"].rows.values() for r in rows):
        if "part" in row:
            bars.setdefault(row["scenario"], {})[row["part"]] = row["bytes"]
        elif str(row.get("what", "")).startswith("the card must hold"):
            ticks[row["scenario"]] = row["bytes"]
    drawn = {"your run": need, **{f"→ {s.change}": mm.requirement(s.run) for s in lesson["suggestions"][:4]}}
    assert set(ticks) == set(bars) == set(drawn)
    for name, each in drawn.items():
        assert ticks[name] == each.bytes
        stacked = dict(bars[name])
        adds = stacked.pop("peak_adds", 0)
        assert stacked == {k: int(v) for k, v in each.memory.parts().items() if int(v)}
        assert adds == max(0, each.bytes - int(each.memory.total)) if each.basis != "sum of parts" else adds == 0
    for suggestion in lesson["suggestions"][:4]:
        assert ticks[f"→ {suggestion.change}"] == suggestion.total


def test_the_grid_covers_what_the_suite_promises():
    cases = list(GRID.values())
    assert len({c["model"] for c in cases}) >= 8
    assert {"gpt2", "llama-2-7b"} <= {c["model"] for c in cases}  # presets built in code (gpt2_model, llama_model)
    assert any(c["model"].startswith("file:") for c in cases)  # a config.json read from a file
    assert {c.get("method", "full") for c in cases} >= {"full", "freeze", "adapters", "lora", "qlora"}
    assert any(c.get("precision") == "amp" for c in cases) and any(c.get("zero") == 3 for c in cases)
    assert {bool(c.get("checkpointing")) for c in cases} == {True, False}
    # Cards without bf16 (T4, V100: compute capability 7.x), the default recipe pure bf16 on them, fitting or not.
    assert {c["gpu"] for c in cases if "precision" not in c} >= {"T4", "V100 32GB"}


def test_a_preset_built_in_code_and_its_config_json_are_one_run(config_file):
    # gpt2 is built with gpt2_model; openai-community/gpt2's config.json gives the same shape and the same defaults.
    path = config_file.parent / "gpt2.json"
    path.write_text(json.dumps(PUBLISHED_CONFIGS["gpt2"]))
    built, read = mm.Run("gpt2", batch_size=4, seq_len=512), mm.Run(mm.from_hf_config(path), batch_size=4, seq_len=512)
    assert built.settings() == read.settings()
    assert mm.requirement(built).bytes == mm.requirement(read).bytes
    assert mm.training_memory(built).parts() == mm.training_memory(read).parts()


def test_a_run_with_gradient_accumulation_is_one_answer_in_the_api_and_the_command_line():
    # Llama-2-7B, LoRA r16 on every linear layer, micro-batches of 4 x 1,024 tokens accumulated 8 times (an
    # effective batch of 32), on an RTX 4090: the API and --json give the same run, parts, peak and changes.
    args = ["train", "llama-2-7b", "--method", "lora", "--rank", "16", "--targets", "all", "--batch", "4",
            "--seq", "1024", "--grad-accum", "8", "--gpu", "RTX 4090", "--json"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(args)
    report = json.loads(out.getvalue())
    api = mm.plan_training("llama-2-7b", "RTX 4090", method=mm.LoRA(rank=16, targets=("all",)), batch_size=4,
                           seq_len=1024, grad_accum_steps=8)
    assert report["run"] == repr(api.run) and "grad_accum_steps=8" in report["run"]
    assert report["settings"]["grad_accum_steps"] == 8 and report["settings"]["effective_batch"] == 32 == \
        api.run.effective_batch
    assert report["parts"] == {k: int(v) for k, v in api.memory.parts().items()}
    assert report["required"]["bytes"] == api.requirement.bytes and report["required"]["basis"] == "peak"
    assert report["peak"]["total"] == int(api.requirement.peak.total)
    # The held gradients are in that number: above the same micro-batch without accumulation.
    assert api.requirement.bytes > mm.requirement(api.run.replace(grad_accum_steps=1)).bytes
    assert status == (0 if api.fits else 1)
    if not api.fits:
        assert [(c["change"], c["required_bytes"], c["fits"]) for c in report["changes"]] == \
            [(s.change, s.total, s.fits) for s in api.changes]
    # The planner's smaller micro-batch keeps the 32 sequences per optimizer step: 1 x 32 (nothing larger fits).
    assert "batch size 1, accumulate 32" in [c["change"] for c in report["changes"]]
