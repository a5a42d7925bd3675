"""One run, one answer on the pages of lessons 3, 5 and 7 (tests/test_one_run_one_answer.py does lesson 8).

Each lesson runs at its defaults (and in a few more states a control reaches). For every run a page shows, the test
builds the same run itself from what the page states (the model, batch, length, recipe: spelled out here, never read
from the lesson's code), asks the Python API and the command line (`memmath train|infer ... --json`, in process, as
`memmath` runs main) for its bytes, and checks three things:

1. the page's text shows those bytes, formatted as the page formats them (mm.format_bytes, or viz.readable_size
   where the page picks the unit by size);
2. the command line's JSON gives the same bytes as the API (and so as the page) for that run;
3. within the page, where a total stands beside its parts (a table row, a chart's bars, a stat row), the parts add
   to the total, or the page says why not (the peak of a step against the sum of its parts).

The command line gets only the settings a learner would type from the page; every other one is left to its default
and the JSON's settings are checked against what the page states, so a default that drifts in one entry point fails.
"""

from __future__ import annotations

import contextlib
import io
import json
import re

import marimo as mo
import pytest

import lessons
import memmath as mm
from memmath import cli
from memmath_lessons import viz

GB = 10**9


def _cli(*args):
    """`memmath <args> --json` in this process: (exit status, the JSON)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main([*args, "--json"])
    return status, json.loads(out.getvalue())


def _page(outputs):
    return lessons.plain_text(outputs)


def _nonzero(parts: dict) -> dict:
    return {k: int(v) for k, v in parts.items() if int(v)}


def _chart_rows(chart) -> list[dict]:
    """Every row a live chart holds (all its datasets)."""
    return [row for rows in chart.rows.values() for row in rows]


def _bars(chart, scenario) -> dict:
    """part -> bytes of one bar of a viz.stacked_bars_output chart."""
    return {r["part"]: r["bytes"] for r in _chart_rows(chart) if r.get("scenario") == scenario and "part" in r}


# ---- lesson 3: activations --------------------------------------------------------------------------------
# The defaults the page states: the preset gpt2 (openai-community/gpt2's config.json: 12 layers, width 768, 12 heads,
# vocabulary 50,257, 1,024 positions), b = 4 sequences of s = 1,024 tokens, pure bf16 with AdamW, eager attention,
# no checkpointing; "by Korthikanti et al.'s formula" is memmath's activations="textbook", with dropout masks.
L3 = dict(model="gpt2", batch=4, seq=1024, attention="eager")
GPT2 = dict(L=12, h=768, a=12, V=50257, params=124_439_808)  # 124,439,808: transformers' GPT2LMHeadModel (tied head)


@pytest.fixture(scope="module")
def lesson3():
    outputs, defs = lessons.run("03_activations")
    return defs, _page(outputs)


def _l3_train(attention="eager", checkpointing=False, textbook=True, seq=L3["seq"]):
    args = ["train", "gpt2", "--batch", str(L3["batch"]), "--seq", str(seq), "--attention", attention]
    args += ["--checkpointing"] if checkpointing else []
    args += ["--activations", "textbook"] if textbook else []
    status, report = _cli(*args)
    assert status == 0 and report["settings"]["precision"] == "bf16" and report["settings"]["optimizer"] == "adamw"
    assert report["settings"]["dropout"] is True  # GPT-2's config: dropout 0.1, as the page's formula counts masks
    api = mm.training_memory(mm.Run("gpt2", precision="bf16", optimizer="adamw", batch_size=L3["batch"], seq_len=seq,
                                    attention=attention, checkpointing=checkpointing, dropout=True,
                                    activations="textbook" if textbook else None))
    assert report["parts"] == {k: int(v) for k, v in api.parts().items()}  # the command line is the API
    assert report["sum_of_parts"] == int(api.total) == sum(report["parts"].values())
    return report


def test_lesson_3_stands_at_the_defaults_its_page_states(lesson3):
    defs, page = lesson3
    assert (defs["batch_size"], defs["seq_len"], defs["attention"], defs["checkpointing"], defs["unit"]) == \
        (L3["batch"], L3["seq"], L3["attention"], False, "GB")
    assert (defs["n_layers"], defs["width"], defs["n_heads"], defs["vocab"]) == \
        (GPT2["L"], GPT2["h"], GPT2["a"], GPT2["V"])
    assert "For the preset gpt2" in page and f"{GPT2['params']:,} parameters, at b = 4 sequences of s = 1,024" in page


def test_lesson_3_opening_claim_is_the_articles_7b_model(lesson3):
    _, page = lesson3
    # The article's 7B model in pure bf16 with AdamW, before activations: 2 + 2 + 4 = 8 B per parameter (AdamW's
    # 4-byte step counters add a few hundred bytes) = 56.00 GB. (The command line takes no bare parameter count.)
    assert f"needs about {mm.format_bytes(7e9 * 8)} to finetune" in page
    api = mm.training_memory(mm.uniform_model(7e9, 32), precision="bf16", optimizer="adamw", seq_len=None)
    assert mm.format_bytes(api.without_activations) == mm.format_bytes(7e9 * 8)


def test_lesson_3_number_is_the_formula_and_the_command_lines(lesson3):
    defs, page = lesson3
    s, b, h, a, L, V = L3["seq"], L3["batch"], GPT2["h"], GPT2["a"], GPT2["L"], GPT2["V"]
    # Korthikanti et al. 2022, section 4.1: one eager GPT block keeps s*b*h*(34 + 5*a*s/h) bytes.
    block = s * b * h * (34 + 5 * a * s // h)  # 358,612,992 B
    outside = 2 * s * b * h + 2 * s * b * h + s * b * h  # final norm's and head's 16-bit inputs, embedding dropout mask
    loss = 4 * s * b * V  # fp32 logits
    report = _l3_train()
    parts = report["parts"]
    # 3. The page's activations are its blocks, what lies outside them and the loss: they add up, to the byte.
    assert parts["activations"] == L * block + outside + loss
    rest = report["sum_of_parts"] - parts["activations"]
    # 1, 2. The page shows the command line's bytes.
    assert f"activations {viz.readable_size(parts['activations'])} , against {viz.readable_size(rest)}" in page
    assert f"= {viz.readable_size(block)} ." in page
    assert f"{L} layers × {viz.readable_size(block)} kept per layer = {viz.readable_size(L * block)}." in page
    assert f"and the embedding dropout mask, {viz.readable_size(outside)}." in page
    assert f"4·{s:,}·{b}·{V:,} = {viz.readable_size(loss)}." in page
    # Its bars: the training bar is the command line's parts, the inference bar `memmath infer`'s.
    assert _bars(defs["bars_chart"], "Training (your settings)") == _nonzero(parts)


def test_lesson_3_four_combinations_are_four_command_lines(lesson3):
    _, page = lesson3
    for attention, label in (("eager", "eager"), ("sdpa", "fused (SDPA)")):
        for checkpointing in (False, True):
            report = _l3_train(attention, checkpointing)
            act, total = report["parts"]["activations"], report["sum_of_parts"]
            ratio = act / (total - act)
            ratio_text = f"{ratio:,.2f}×" if ratio >= 1 else f"{ratio:.2g}×"
            # One row: its activations and total (the activations plus the rest, which it divides by).
            row = (f"{label} {'yes' if checkpointing else 'no'} {viz.readable_size(act)} {viz.readable_size(total)} "
                   f"{ratio_text}")
            assert row in page, row


def test_lesson_3_sweep_crossings_are_the_command_lines(lesson3):
    _, page = lesson3
    # "already bigger than the weights at 128" and "pass weights, gradients and optimizer states together at 512":
    # the first length of the sweep (128, 256, 512, ...) where the command line's activations pass each.
    assert "already bigger than the weights at a sequence length of 128" in page
    at_128 = _l3_train(seq=128)
    assert at_128["parts"]["activations"] > at_128["parts"]["weights"]
    below, above = _l3_train(seq=256), _l3_train(seq=512)
    assert below["parts"]["activations"] <= below["sum_of_parts"] - below["parts"]["activations"]
    assert above["parts"]["activations"] > above["sum_of_parts"] - above["parts"]["activations"]
    assert "pass weights, gradients and optimizer states together at a sequence length of 512" in page


def test_lesson_3_training_against_inference_is_the_command_lines(lesson3):
    defs, page = lesson3
    train = _l3_train(textbook=False)  # memmath's default activation model for the preset
    status, infer = _cli("infer", "gpt2", "--batch", str(L3["batch"]), "--context", str(L3["seq"]), "--attention",
                         "eager")
    assert status == 0 and (infer["settings"]["weights_format"], infer["settings"]["kv_format"]) == ("bf16", "bf16")
    api = mm.inference_memory("gpt2", weights_format="bf16", kv_format="bf16", batch_size=4, context_len=1024,
                              attention="eager")
    assert infer["parts"] == {k: int(v) for k, v in api.parts().items()} and infer["total"] == int(api.total)
    assert infer["total"] == sum(infer["parts"].values())  # 3. weights + cache + working set is the total
    p = infer["parts"]
    assert f"{viz.readable_size(train['parts']['activations'])} here by memmath's default" in page
    assert f"formula above counts {viz.readable_size(_l3_train()['parts']['activations'])})" in page
    assert f"working set ({viz.readable_size(p['working_set'])} for a prefill" in page
    assert f"earlier tokens ({viz.readable_size(p['kv_cache'])})" in page
    assert (f"training {viz.readable_size(train['sum_of_parts'])}, inference {viz.readable_size(infer['total'])}"
            in page)
    assert _bars(defs["bars_chart"], "Inference, same batch and length") == _nonzero(p)


# The timeline section states: "Each run is in pure bf16 with AdamW at 2,048 tokens, a step after the first"; its
# controls start at Llama-2-7B, batch 1, full finetuning, no checkpointing.
TIMELINE_STATES = {
    "defaults: llama-2-7b, full, batch 1": dict(method=mm.Full(), checkpointing=False, args=[]),
    "LoRA r16 on q and v, checkpointing": dict(method=mm.LoRA(rank=16, targets=("q", "v")), checkpointing=True,
                                               args=["--method", "lora", "--rank", "16", "--targets", "q,v",
                                                     "--checkpointing"]),
}


@pytest.fixture(scope="module")
def lesson3_lora():
    outputs, defs = lessons.run_with(
        "03_activations",
        timeline_method_radio=mo.ui.radio(options={"full finetuning": "full", "LoRA, rank 16 on q and v": "lora"},
                                          value="LoRA, rank 16 on q and v"),
        timeline_checkpointing_switch=mo.ui.switch(value=True))
    return defs, _page(outputs)


@pytest.mark.parametrize("state", TIMELINE_STATES)
def test_lesson_3_timeline_is_the_peak_the_command_line_judges(state, lesson3, lesson3_lora):
    defs, page = lesson3 if state.startswith("defaults") else lesson3_lora
    case = TIMELINE_STATES[state]
    # (run_with skips the controls' cell, whose prose states the setup: read it on the default page.)
    assert "pure bf16 with AdamW at 2,048 tokens" in lesson3[1]
    run = mm.Run("llama-2-7b", precision="bf16", optimizer="adamw", method=case["method"], batch_size=1,
                 seq_len=2048, checkpointing=case["checkpointing"])
    assert defs["timeline_run"] == run  # the page's run is the one its prose states
    api, timeline = mm.requirement(run), mm.step_timeline(run)
    status, report = _cli("train", "llama-2-7b", "--batch", "1", "--seq", "2048", *case["args"])
    assert status == 0 and report["run"] == repr(run)
    # 2. One answer: the command line's peak and parts are the API's.
    assert report["required"] == {**report["required"], "bytes": api.bytes, "basis": "peak"}
    assert report["peak"]["total"] == timeline.peak.total == api.bytes
    assert report["parts"] == {k: int(v) for k, v in api.memory.parts().items()}
    parts = report["parts"]
    # 1. The page's figures: before the step (the weights and the previous step's optimizer states, as it says), the
    # saved activations' top, the peak and the sum of the parts, which it says is a different number.
    f = mm.format_bytes
    assert f"Before the step the card holds {f(parts['weights'] + parts['optimizer_states'])}" in page
    saved = max(timeline.points, key=lambda p: p.parts["saved activations"])
    assert f"saved activations peak at {f(saved.parts['saved activations'])} ({saved.short})" in page
    assert f"The highest moment is {timeline.peak.short}, {f(report['peak']['total'])} :" in page
    assert f"judges this run on the same {f(report['required']['bytes'])} (lesson 8)" in page
    assert f"The sum of the parts, {f(report['sum_of_parts'])}, is a different number" in page
    # 3. The chart: each moment's stacked bytes add to that moment's total, the tallest is the command line's peak,
    # and once every gradient exists (at the embeddings) the stack holds the command line's weights, gradients and
    # optimizer states.
    rows = _chart_rows(defs["timeline_chart"])
    moments = {}
    for row in rows:
        moments.setdefault(row["when"], {})[row["category"]] = row["bytes"]
    assert [sum(m.values()) for m in moments.values()] == [p.total for p in timeline.points]
    assert max(sum(m.values()) for m in moments.values()) == report["peak"]["total"]
    embeddings = moments["backward, embeddings"]
    assert (embeddings["weights"], embeddings["gradients"], embeddings["optimizer states"]) == \
        (parts["weights"], parts["gradients"], parts["optimizer_states"])


# ---- lesson 5: adapters -----------------------------------------------------------------------------------
# Houlsby et al. 2019: an adapter is a down-projection (h x m weights, m biases) and an up-projection (m x h, h), two
# per block. BERT-large (google-bert/bert-large-uncased: h = 1,024, 24 blocks) at the page's m = 64.
L5_SCENARIOS = {  # the memory table's rows: label on the page -> (the command line's options, its verdict's words)
    "Full finetuning": (["--method", "full"], ("full finetuning", "fits", "does not fit")),
    "Freeze: last block trains": (["--method", "freeze", "--trainable-layers", "1"],
                                  ("freezing all but the last block", "fits", "does not fit")),
    "Adapters, m = 64": (["--method", "adapters", "--bottleneck", "64"], ("adapters", "fit", "do not fit")),
}
L5_MODELS = {"BERT-large (the paper's base)": "bert-large-uncased", "BERT-base": "bert-base-uncased",
             "Llama-2-7B (a LLaMA-size model)": "llama-2-7b"}


@pytest.fixture(scope="module")
def lesson5():
    outputs, defs = lessons.run("05_adapters")
    return defs, _page(outputs)


def test_lesson_5_number_is_houlsbys_count_and_the_command_lines(lesson5):
    defs, page = lesson5
    assert defs["bottleneck"] == 64 and defs["train_norms"] is False
    per_adapter = 2 * 64 * 1024 + 64 + 1024  # 132,160
    status, report = _cli("train", "bert-large-uncased", "--method", "adapters", "--bottleneck", "64")
    model = report["model"]
    assert model["trainable_params"] == 2 * 24 * per_adapter == model["adapter_params"]  # 3. the blocks add up
    assert (f"{per_adapter:,} parameters, two per block make {2 * per_adapter:,}, and 24 blocks "
            f"{2 * 24 * per_adapter:,}: {model['trainable_params']:,} of {model['total_params']:,} parameters train, "
            f"{model['trainable_params'] / model['total_params']:.2%} of the model") in page
    # The table of the same bottleneck on three models: each row's count is the command line's for that model.
    table = defs["adapter_counts"]
    for label, preset in L5_MODELS.items():
        _, each = _cli("train", preset, "--method", "adapters", "--bottleneck", "64")
        row = table[table["model"] == label].iloc[0]
        assert row["trainable params"] == each["model"]["trainable_params"]
        assert row["of the base model"] == f"{each['model']['trainable_params'] / each['model']['total_params']:.2%}"


def _lesson5_memory(defs, page, batch, seq, gpu="RTX 4090"):
    """The memory section for Llama-2-7B in pure bf16 with AdamW (as the page states) against the command line."""
    table = defs["memory_table"]
    reports = {}
    for label, (args, _) in L5_SCENARIOS.items():
        status, report = _cli("train", "llama-2-7b", *args, "--batch", str(batch), "--seq", str(seq), "--gpu", gpu)
        assert (report["settings"]["precision"], report["settings"]["optimizer"]) == ("bf16", "adamw")
        reports[label] = report
        parts, row = report["parts"], table[table["scenario"] == label].iloc[0]
        # 3. The row's columns are every part: weights, gradients and states, activations add to its total.
        held = parts["gradients"] + parts["gradient_accumulation"] + parts["master_weights"] + parts["optimizer_states"]
        assert parts["weights"] + parts["quantization_constants"] + held + parts["activations"] == \
            report["sum_of_parts"]
        assert parts["quantization_constants"] == 0
        # 1, 2. The row shows the command line's bytes (rounded as the table rounds them) and the bars are its parts.
        assert (row["trainable"], row["weights (GB)"], row["grads + states (GB)"], row["activations (GB)"],
                row["sum of the parts (GB)"], row["the card must hold (GB)"]) == (
            report["model"]["trainable_params"], round(parts["weights"] / GB, 2), round(held / GB, 3),
            round(parts["activations"] / GB, 2), round(report["sum_of_parts"] / GB, 2),
            round(report["verdict"]["required_bytes"] / GB, 2))
        # The bars are its parts, and where the step's peak is above their sum one more segment adds the difference,
        # so that the bar ends at what the command line says the card must hold.
        bars = _bars(defs["bars_chart"], label)
        adds = bars.pop("peak_adds", 0)
        assert bars == _nonzero(parts)
        assert adds == max(report["verdict"]["required_bytes"] - report["sum_of_parts"], 0)
    return reports


def test_lesson_5_memory_table_is_three_command_lines(lesson5):
    defs, page = lesson5
    assert (defs["memory_model_dropdown"].value, defs["batch_slider"].value, defs["seq_len_slider"].value,
            defs["gpu"].name) == ("llama-2-7b", 2, 512, "RTX 4090")
    reports = _lesson5_memory(defs, page, 2, 512)
    full, freeze, adapt = (reports[k]["parts"] for k in L5_SCENARIOS)
    f = mm.format_bytes
    held = lambda p: p["gradients"] + p["optimizer_states"]  # noqa: E731 (no accumulation, no master copy here)
    assert f"adapters save {f(held(full) - held(adapt))} of gradients" in page
    added = f(adapt["weights"] - full["weights"], "MB")
    assert f"the base model's {f(full['weights'])} plus {added} of adapters" in page
    assert (f"Their activations are {f(adapt['activations'])}, {adapt['activations'] / full['activations']:.0%} of "
            f"full finetuning's {f(full['activations'])}") in page
    assert f"Freezing all but the last block keeps only {f(freeze['activations'])}." in page
    verdict = reports["Full finetuning"]["verdict"]
    assert f"so {f(verdict['available_bytes'])} is left" in page


def _smallest_card(args, batch, seq):
    """The smallest card (by memory, the catalog's order among equals) on which the command line says it fits."""
    for gpu in sorted(mm.GPUS.values(), key=lambda g: g.memory_bytes):
        status, report = _cli("train", "llama-2-7b", *args, "--batch", str(batch), "--seq", str(seq), "--gpu", gpu.name)
        if report["verdict"]["fits"]:
            return gpu.name
    return "none listed"


L5_VERDICT_STATES = [
    pytest.param(2, 512, id="defaults: batch 2 x 512 tokens"),
    # Found when the page judged each run on the sum of its parts with no margin: it said "adapters fit"
    # on the RTX 4090 (sum 23.68 GB of 24.35 GB usable) and named it the smallest card, while `memmath train
    # llama-2-7b --method adapters --batch 2 --seq 1024 --gpu "RTX 4090"` needs the 24.14 GB peak + 5%: no fit.
    pytest.param(2, 1024, id="batch 2 x 1,024 tokens"),
    # And without the margin: "freezing all but the last block fits" (sum 20.90 GB, smallest card A10G) where the
    # command line's peak, 24.43 GB, passes the RTX 4090's 24.35 GB usable (smallest card: V100 32GB).
    pytest.param(4, 4096, id="batch 4 x 4,096 tokens"),
]


@pytest.mark.parametrize("batch, seq", L5_VERDICT_STATES)
def test_lesson_5_verdicts_are_the_command_lines(batch, seq):
    outputs, defs = lessons.run_with(
        "05_adapters", batch_slider=mo.ui.slider(1, 64, value=batch),
        seq_len_slider=mo.ui.slider(steps=[64, 128, 256, 512, 1024, 2048, 4096], value=seq))
    page = _page(outputs)
    reports = _lesson5_memory(defs, page, batch, seq)
    table = defs["memory_table"]
    for label, (args, (what, yes, no)) in L5_SCENARIOS.items():
        assert f"{what} {yes if reports[label]['verdict']['fits'] else no}" in page, label
        assert table[table["scenario"] == label].iloc[0]["smallest GPU"] == _smallest_card(args, batch, seq), label


def test_lesson_5_problem_3_is_the_command_lines(lesson5):
    _, page = lesson5
    # Llama-2-7B, batch 8 x 1,024 tokens, pure bf16 with AdamW: adapters m = 64 against freezing all but the last block.
    _, adapt = _cli("train", "llama-2-7b", "--method", "adapters", "--bottleneck", "64", "--batch", "8", "--seq",
                    "1024")
    _, freeze = _cli("train", "llama-2-7b", "--method", "freeze", "--trainable-layers", "1", "--batch", "8", "--seq",
                     "1024")
    assert (f"Adapters: {mm.format_bytes(adapt['parts']['activations'])} of activations; freezing all but the last "
            f"block: {mm.format_bytes(freeze['parts']['activations'])}") in page


# ---- lesson 7: inference ----------------------------------------------------------------------------------
# The defaults: Llama-3-8B at 8,192 tokens, one sequence, weights and cache in bf16, sdpa, on an RTX 4090, in GB.
PRESETS_7 = [name for name, shape in mm.PRESETS.items() if shape.family != "bert"]


@pytest.fixture(scope="module")
def lesson7():
    outputs, defs = lessons.run("07_inference")
    return defs, _page(outputs)


@pytest.fixture(scope="module")
def lesson7_models():
    """Lesson 7 with each sliding-window preset the issue names, everything else at its default."""
    runs = {}
    for name in ("mistral-7b", "gemma-2-2b", "phi-3-mini"):
        outputs, defs = lessons.run_with("07_inference", model_dropdown=mo.ui.dropdown(PRESETS_7, value=name))
        runs[name] = defs, _page(outputs)
    return runs


def _shown(n):
    """A part as lesson 7 prints it: in GB, or in a smaller unit under a tenth of a GB."""
    return mm.format_bytes(n) if n >= GB / 10 else viz.readable_size(n)


def _rate(t):
    return f"{t:,.1f}" if t >= 0.1 else f"{t:.2g}"


def _infer(model, *args):
    status, report = _cli("infer", model, *args)
    s = report["settings"]
    assert (s["weights_format"], s["kv_format"], s["attention"]) == ("bf16", "bf16", "sdpa") or "--weights" in args
    return status, report


def _recipe_product(page, name):
    """The bytes the page's KV-cache recipe multiplies out to: its numbers, with the words between them dropped."""
    recipe = re.search(rf"{re.escape(name)}'s KV cache at this context: .+? = (.+?)\. With the weights", page).group(1)
    recipe = re.sub(r"\((?!\d)[^()]*\)", "", recipe)  # "(key and value)", "(bf16)", "(the window)"
    recipe = re.sub(r"[A-Za-z/-]+", " ", recipe.replace(" x ", " * ").replace(",", ""))
    assert re.fullmatch(r"[\d\s*+().]+", recipe), recipe
    return eval(recipe)  # digits, *, + and parentheses only (checked above)


def _lesson7_run(defs, page, name, report):
    p = report["parts"]
    stored = p["weights"] + p["quantization_constants"]
    # 3. The stat row's parts add to its total, the bars are the parts, and the recipe multiplies out to the cache.
    assert stored + p["kv_cache"] + p["working_set"] == report["total"]
    assert _bars(defs["bars_chart"], "detailed sum") == _nonzero(p)
    assert _recipe_product(page, name) == p["kv_cache"]
    # 1, 2. The page shows the command line's bytes.
    assert f"{name}'s KV cache at this context: {_shown(p['kv_cache'])} =" in page
    assert (f"Weights (+ constants) {mm.format_bytes(stored)} KV cache {_shown(p['kv_cache'])} Working set "
            f"{_shown(p['working_set'])} Total {mm.format_bytes(report['total'])} Weights x 1.2 "
            f"{mm.format_bytes(report['rule_of_thumb'])}") in page
    assert f"the detailed sum is {mm.format_bytes(report['total'])} , which" in page
    verdict = report["verdict"]
    if verdict["fits"]:
        assert f"fits on one RTX 4090, with {mm.format_bytes(verdict['headroom_bytes'])} to spare" in page
        assert (f"at most {_rate(report['decode_tokens_per_second_upper_bound'])} tokens/s per sequence" in page)
    else:
        assert f"does not fit on one RTX 4090: {mm.format_bytes(-verdict['headroom_bytes'])} short" in page
    assert f"{mm.format_bytes(verdict['available_bytes'])} are usable" in page
    # The sweep's areas at this context are the same parts.
    sweep = [r for r in _chart_rows(defs["sweep_chart"]) if r.get("kind") == "part" and r["context"] == 8192]
    assert sum(r["size"] for r in sweep) == pytest.approx(report["total"] / GB, rel=1e-12)


def test_lesson_7_default_run_is_memmath_infer(lesson7):
    defs, page = lesson7
    assert (defs["model"].name, defs["context_len"], defs["batch_size"], defs["weights_format"], defs["kv_format"],
            defs["attention"], defs["gpu"].name, defs["unit"]) == \
        ("llama-3-8b", 8192, 1, "bf16", "bf16", "sdpa", "RTX 4090", "GB")
    status, report = _infer("llama-3-8b", "--context", "8192", "--gpu", "RTX 4090")
    assert report["settings"]["batch_size"] == 1 and status == 0
    api = mm.plan_serving("llama-3-8b", "RTX 4090", weights_format="bf16", kv_format="bf16", batch_size=1,
                          context_len=8192, attention="sdpa")
    assert report["parts"] == {k: int(v) for k, v in api.memory.parts().items()}
    assert report["decode_tokens_per_second_upper_bound"] == api.decode_tokens_per_second
    # meta-llama/Meta-Llama-3-8B's config.json: 32 layers, 8 key/value heads of 128 (kipply 2022: 2 x ... x 2 B).
    assert report["parts"]["kv_cache"] == 2 * 32 * 8 * 128 * 2 * 8192
    _lesson7_run(defs, page, "llama-3-8b", report)
    p = report["parts"]
    assert f"Decoding on it reads {mm.format_bytes(p['weights'] + p['kv_cache'])} per step (weights and cache)" in page
    # Weights x 1.2: the allowance, and the longest context it covers, where the command line's total passes it.
    assert report["rule_of_thumb"] == pytest.approx(1.2 * p["weights"], abs=1)
    assert f"an allowance of {mm.format_bytes(report['rule_of_thumb'] - p['weights'])}" in page
    limit = int(re.search(r"up to ([\d,]+) tokens per sequence, and no further", page).group(1).replace(",", ""))
    at, past = (_infer("llama-3-8b", "--context", str(c))[1] for c in (limit, limit + 1))
    assert at["total"] <= at["rule_of_thumb"] < past["total"]


def test_lesson_7_tables_are_the_same_run(lesson7):
    defs, page = lesson7
    _, report = _infer("llama-3-8b", "--context", "8192", "--gpu", "RTX 4090")
    p = report["parts"]
    # The cards fold: each card's verdict, headroom and decode bound are the command line's on that card.
    for _, row in defs["fit_frame"].iterrows():
        _, each = _infer("llama-3-8b", "--context", "8192", "--gpu", row["gpu"])
        v = each["verdict"]
        assert row["fits"] == ("yes" if v["fits"] else "no"), row["gpu"]
        assert row["headroom (GB)"] == f"{abs(v['headroom_bytes']) / GB:,.2f} GB {'spare' if v['fits'] else 'short'}"
        assert row["decode bound (tokens/s)"] == (_rate(each["decode_tokens_per_second_upper_bound"]) if v["fits"]
                                                  else "does not fit")
    # The grouped-query fold's Llama-3-8B row is this run's cache; 2 x 32 x 8 x 128 x 2 B = 131,072 B per token.
    gqa = defs["gqa_frame"].set_index("model").loc["llama-3-8b"]
    assert (gqa["KB per token"], gqa["cache (GB)"]) == (round(131_072 / 1e3, 1), round(p["kv_cache"] / GB, 2))
    # The formats table's bf16 row is this run's weights.
    formats = defs["formats_frame"].set_index("format").loc["bf16"]
    assert formats["weights (GB)"] == round(p["weights"] / GB, 2)


@pytest.mark.parametrize("name", ["mistral-7b", "gemma-2-2b", "phi-3-mini"])
def test_lesson_7_sliding_window_models_are_memmath_infer(name, lesson7_models):
    defs, page = lesson7_models[name]
    status, report = _infer(name, "--context", "8192", "--gpu", "RTX 4090")
    assert "sliding-window" in page  # the recipe names the windowed layers
    _lesson7_run(defs, page, name, report)


def test_lesson_7_pasted_config_is_memmath_infer_on_that_file(tmp_path):
    outputs, defs = lessons.run_with("07_inference", source_radio=mo.ui.radio(["preset", "paste config.json"],
                                                                              value="paste config.json"))
    page = _page(outputs)
    path = tmp_path / "config.json"
    path.write_text(defs["config_text_area"].value)
    status, report = _infer(str(path), "--context", "8192", "--gpu", "RTX 4090")
    name = re.search(r"(\S+)'s KV cache at this context", page).group(1)
    _lesson7_run(defs, page, name, report)


def test_lesson_7_problems_are_memmath_infer(lesson7):
    _, page = lesson7
    # 1. Llama-2-13B (meta-llama/Llama-2-13b-hf: 40 layers, 40 key/value heads of 128): 819,200 B per token in 16 bits.
    _, r13 = _infer("llama-2-13b", "--context", "8192")
    assert r13["parts"]["kv_cache"] == 2 * 40 * 40 * 128 * 2 * 8192
    kv = r13["parts"]["kv_cache"]
    assert f"= {mm.format_bytes(kv)} for one; {mm.format_bytes(8 * kv)} for eight" in page
    assert f"819,200 B x 8,192 = {mm.format_bytes(kv)} of cache" in page  # the "Three parts" section, same run
    # 3. Llama-2-7B at 4,096 tokens on an RTX 4090, bf16 and nf4.
    for fmt in ("bf16", "nf4"):
        _, r = _infer("llama-2-7b", "--context", "4096", "--gpu", "RTX 4090", "--weights", fmt)
        p = r["parts"]
        read = p["weights"] + p["quantization_constants"] + p["kv_cache"]
        assert (f"{fmt} reads {mm.format_bytes(read)}" in page and
                f"at most {r['decode_tokens_per_second_upper_bound']:,.1f} tokens/s" in page), fmt
    # 4. Up to which context weights x 1.2 covers Llama-2-7B, one sequence and eight.
    found = re.search(r"([\d,]+) tokens with one sequence; ([\d,]+) tokens with eight", page)
    for batch, limit in zip((1, 8), (int(g.replace(",", "")) for g in found.groups())):
        at = _infer("llama-2-7b", "--context", str(limit), "--batch", str(batch))[1]
        past = _infer("llama-2-7b", "--context", str(limit + 1), "--batch", str(batch))[1]
        assert at["total"] <= at["rule_of_thumb"] < past["total"], batch
    # 5. Qwen3-30B-A3B in bf16 at 4,096 tokens on an H100 80GB, batch 1 and 32.
    _, one = _infer("qwen3-30b-a3b", "--context", "4096", "--gpu", "H100 80GB")
    _, many = _infer("qwen3-30b-a3b", "--context", "4096", "--gpu", "H100 80GB", "--batch", "32")
    assert f"plus {mm.format_bytes(one['parts']['kv_cache'])} of cache" in page
    assert f"at most {one['decode_tokens_per_second_upper_bound']:,.0f} tokens/s" in page
    # At batch 32 every expert is reached: a step reads every weight, the command line's weights part.
    assert (f"reads every weight, {mm.format_bytes(many['parts']['weights'])}, plus "
            f"{mm.format_bytes(many['parts']['kv_cache'])} of cache: at most "
            f"{many['decode_tokens_per_second_upper_bound']:,.1f} tokens/s per sequence") in page
