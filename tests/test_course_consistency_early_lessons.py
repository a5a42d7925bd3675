"""One run, one answer on the pages of lessons 0, 1, 2, 4 and 6 (tests/test_course_consistency.py does
lessons 3, 5 and 7, tests/test_one_run_one_answer.py lesson 8).

Each lesson runs at its defaults and in one or two more states a control reaches. For every run a page shows
numbers about (a model's weights in a format, the parts of a full finetuning, freezing, LoRA or QLoRA run, their
sum, what the card must hold, a verdict on a card), the test builds the run itself from what the page states (spelled
out here, never read from the lesson's code), asks the command line (`memmath train|infer|gpus ... --json`, in
process, as `memmath` runs main) for it, and checks that the page's text shows those bytes formatted as the page
formats them (mm.format_bytes, or viz.readable_size where the page picks the unit by size).

The command line gets only what a learner would type from the page; the JSON's settings are checked against what
the page states. Where the command line cannot express the run (a bare parameter count, ten equal layers, a recipe
or an adapter format it has no flag for), the test asks the API call that gives it and says why in a comment.
Where a page and the command line disagree, the test is marked xfail(strict=True) with what differs.
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
from memmath_lessons import viz

GB = 10**9
f = mm.format_bytes


def _cli(*args):
    """`memmath <args> --json` in this process: (exit status, the JSON)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main([*args, "--json"])
    return status, json.loads(out.getvalue())


def _train(*args):
    status, report = _cli("train", *args)
    assert status in (0, 1), report
    return report


def _before_activations(report) -> int:
    """The command line's sum of the parts less its activations: what a page counts 'before activations'."""
    return report["sum_of_parts"] - report["parts"]["activations"]


def _cards() -> list[dict]:
    """`memmath gpus --json`: every card with its memory as the driver reports it."""
    status, report = _cli("gpus")
    assert status == 0
    return report["gpus"]


def _choose(element, value):
    """A copy of a dropdown or radio set to the option whose value is `value`."""
    [key] = [k for k, v in element.options.items() if v == value]
    return type(element)(options=element.options, value=key)


_RUNS: dict = {}


def _lesson(name, state="defaults", **choices):
    """(defs, page text) of a lesson run, cached per (lesson, state): `choices` maps a control to the value (not
    the label) it is set to, a callable taking the default control for controls a dropdown cannot express."""
    if (name, state) not in _RUNS:
        if not choices:
            outputs, defs = lessons.run(name)
        else:
            _, base = lessons.run(name)
            controls = {k: v(base[k]) if callable(v) else _choose(base[k], v) for k, v in choices.items()}
            outputs, defs = lessons.run_with(name, **controls)
        _RUNS[name, state] = (defs, lessons.plain_text(outputs))
    return _RUNS[name, state]


# ---- lesson 0: start here --------------------------------------------------------------------------------
# The opening budgets are for a bare parameter count (the slider's 7 billion), which the command line does not
# take: they are checked against the API and a hand derivation. The training-against-serving section states its
# runs: one sequence of 2,048 tokens, bf16 weights; training is full finetuning in pure bf16 with Adam, serving
# keeps a bf16 KV cache with fused attention.


def test_lesson_0_opening_budgets_are_the_api_and_the_article():
    _, page = _lesson("00_start_here")
    # 7e9 parameters x 2 B (bf16) = 14 GB to load; x (2 + 2 + 4) B = 56 GB for a step of full finetuning with Adam
    # in pure bf16 (the article), plus Adam's 4-byte step counters, a few bytes that do not move the figure.
    step = mm.training_memory(7 * 10**9, seq_len=None, precision="bf16", optimizer="adam")
    assert f(step.weights) == f(7e9 * 2) and f(step.without_activations) == f(7e9 * 8)
    assert f"7,000,000,000 × 2 B (bf16) = {f(7e9 * 2)} ." in page
    assert f"for Adam's two states) = {f(step.without_activations)} before activations, 4 times" in page


L0_MODELS = ["llama-2-7b", "gpt2", "gemma-3-1b"]  # the default; a tied head with dropout; a sliding window < 2,048


def _l0(model):
    defs, page = (_lesson("00_start_here") if model == "llama-2-7b" else
                  _lesson("00_start_here", model, model_dropdown=model))
    assert defs["context"] == 2048 and defs["model_dropdown"].value == model
    train = _train(model, "--optimizer", "adam")  # --seq left to its default, the page's 2,048
    s = train["settings"]
    assert (s["seq_len"], s["batch_size"], s["precision"], s["method"]["name"]) == (2048, 1, "bf16", "full")
    status, serve = _cli("infer", model)
    s = serve["settings"]
    assert status == 0 and (s["context_len"], s["batch_size"], s["weights_format"], s["kv_format"], s["attention"]) \
        == (2048, 1, "bf16", "bf16", "sdpa")
    return page, train, serve


@pytest.mark.parametrize("model", L0_MODELS)
def test_lesson_0_training_against_serving_is_the_command_lines(model):
    page, train, serve = _l0(model)
    assert serve["parts"]["weights"] == train["parts"]["weights"]  # "same model, same weights"
    ratio = train["required"]["bytes"] / serve["total"]
    assert (f"Same model, same weights ({f(serve['parts']['weights'])}), but training needs "
            f"{f(train['required']['bytes'])} against {f(serve['total'])} for serving: {ratio:.1f} times as "
            "much") in page
    assert f"Its parts add to {f(train['sum_of_parts'])} (the bar)" in page
    assert f": {f(train['parts']['activations'])} of activations." in page


# Found: lesson 0 said training "needs" the sum of the parts (66.46 GB for llama-2-7b) where `memmath train`
# requires the step's peak (67.38 GB); the page now says both, and needs the peak.
def test_lesson_0_training_needs_what_the_command_line_requires():
    page, train, _ = _l0("llama-2-7b")
    assert train["required"]["basis"] == "peak"
    assert f"but training needs {f(train['required']['bytes'])} against" in page


# ---- lesson 1: weights and formats -----------------------------------------------------------------------
# The page opens on a bare 7 billion parameters in bf16 (API: the command line takes no bare count); a published
# model from its menu is what `memmath infer MODEL --weights FORMAT` counts. The cards are judged on the weights
# alone with nothing reserved for the CUDA context (the box unticked, as the page says).


def _holding(weight_bytes) -> tuple[int, str]:
    """How many of `memmath gpus`' cards hold `weight_bytes`, and the smallest that does."""
    cards = sorted(_cards(), key=lambda c: c["memory_bytes"])
    fitting = [c for c in cards if c["memory_bytes"] >= weight_bytes]
    return len(fitting), fitting[0]["name"]


def test_lesson_1_default_7b_is_the_formula_and_the_card_list():
    defs, page = _lesson("01_weights_and_formats")
    assert (defs["n_params"], defs["weights_format"].name, defs["reserved_bytes"]) == (7 * 10**9, "bf16", 0)
    stored = mm.inference_memory(7 * 10**9, weights_format="bf16")  # a bare count: the API, as the page does
    assert stored.weights == 7 * 10**9 * 16 // 8 and stored.quantization_constants == 0  # N x 16 bits / 8
    assert f"7,000,000,000 parameters (7B) × 16 bits ÷ 8 = {f(stored.weights)} of weights in bf16." in page
    count, smallest = _holding(stored.weights)
    assert f"{count} of the {len(_cards())} cards hold these weights ({f(stored.weights)}); the smallest is " \
           f"the {smallest} ." in page


def test_lesson_1_published_model_in_bf16_is_memmath_infer():
    defs, page = _lesson("01_weights_and_formats", "llama-2-7b bf16", preset_dropdown="llama-2-7b")
    status, report = _cli("infer", "llama-2-7b")  # --weights left to its default, the page's bf16
    assert status == 0 and report["settings"]["weights_format"] == "bf16"
    n, weights = report["model"]["total_params"], report["parts"]["weights"]
    assert report["parts"]["quantization_constants"] == 0 and weights == n * 2
    assert f"llama-2-7b : {n:,} parameters ({viz.short_count(n)}) × 16 bits ÷ 8 = {f(weights)} of weights in bf16." \
        in page
    count, smallest = _holding(weights)
    assert f"{count} of the {len(_cards())} cards hold these weights ({f(weights)}); the smallest is the " \
           f"{smallest} ." in page
    # Each card's room: its memory as `memmath gpus` gives it, less the command line's weights.
    rooms = {c["name"]: c["memory_bytes"] - weights for c in _cards()}
    for row in defs["fit_rows"].itertuples(index=False):
        room = rooms[row.gpu]
        assert row.verdict == (f"fits, with {f(room)} to spare" if room >= 0 else f"does not fit: short by {f(-room)}"), \
            row.gpu


def _l1_nf4(model):
    return _lesson("01_weights_and_formats", f"{model} nf4", preset_dropdown=model, format_dropdown="nf4")


@pytest.mark.parametrize("model", ["llama-2-7b", "mixtral-8x7b"])
def test_lesson_1_published_model_loaded_in_nf4_is_memmath_infer(model):
    _, page = _l1_nf4(model)
    status, report = _cli("infer", model, "--weights", "nf4")
    p = report["parts"]
    assert status == 0
    assert (f"it takes {f(p['weights'] + p['quantization_constants'])} : the size lesson 7 and memmath infer give"
            in page)


# Found: with a published model in nf4 the cards judged every weight in nf4 (mixtral-8x7b: 24.09 GB, "held"
# by an RTX 4090) where `memmath infer --weights nf4` loads it at 91.41 GB (its experts stay bf16).
def test_lesson_1_cards_judge_the_weights_memmath_infer_loads():
    _, page = _l1_nf4("mixtral-8x7b")
    _, report = _cli("infer", "mixtral-8x7b", "--weights", "nf4")
    loaded = report["parts"]["weights"] + report["parts"]["quantization_constants"]
    count, _ = _holding(loaded)
    assert f"{count} of the {len(_cards())} cards hold these weights ({f(loaded)} as bitsandbytes loads them)" in page


# ---- lesson 2: full finetuning ---------------------------------------------------------------------------
# One step of full finetuning before activations, on the chosen card, judged by the one rule (memmath.verdict): the
# command line's reserve for the CUDA context, 5% of the figure kept free. `memmath train` always counts activations
# too: the page's figure is its sum of the parts less its activations.


def _judged(need, available):
    """The one rule by hand: fits when need + 5% of it (rounded up) <= available; short by need + 5% - available."""
    margin = -(-need * 5 // 100)
    return "fits" if need + margin <= available else f"does not fit: short by {f(need + margin - available)}"


def test_lesson_2_default_7b_is_the_article_and_the_card():
    _, page = _lesson("02_full_finetuning")
    # A bare 7e9 parameters (the command line takes no bare count): 2 + 2 + 4 = 8 B each in pure bf16 with Adam.
    run = mm.training_memory(7 * 10**9, seq_len=None, precision="bf16", optimizer="adam")
    assert f(run.total) == f(7e9 * 8) and run.activations == 0
    [card] = [c for c in _cards() if c["name"] == "RTX 4090"]
    available = _train("llama-2-7b", "--gpu", "RTX 4090")["verdict"]["available_bytes"]  # the card less the reserve
    assert (f"7B parameters , pure bf16 with Adam: one step of full finetuning keeps {f(run.total)} before "
            f"activations, 7,000,000,000 parameters × {run.total / 7e9:.2f} B per parameter, of which "
            f"{f(7e9 * 2)} are weights. The RTX 4090 reports {f(card['memory_bytes'])}: it holds the weights, and "
            f"the run {_judged(run.total, available)}") in page
    # Problem 4: llama-2-7b in pure bf16 with Adam at 1 x 512 tokens: what the card must hold is the command line's.
    report = _train("llama-2-7b", "--optimizer", "adam", "--batch", "1", "--seq", "512")
    need = report["required"]["bytes"]
    # each card less its own CUDA context, as `memmath gpus --json` lists it (the command line's default reserve)
    fitting = [c for c in _cards() if _judged(need, c["memory_bytes"] - c["cuda_context_bytes"]) == "fits"]
    smallest = min(fitting, key=lambda c: c["memory_bytes"])
    assert (f"the step peaks at {f(need)} ({f(need, 'GiB')}), what the card must hold. With each card's CUDA context "
            f"kept back ({smallest['cuda_context_bytes'] // 2**20:,} MiB on the {smallest['name']}) and 5% of the need "
            f"kept free, the smallest card is the {smallest['name']} ({f(smallest['memory_bytes'], 'GiB')})") in page


L2_STATES = {"llama-2-7b, pure bf16, Adam": ("bf16", "adam"),
             "llama-2-7b, mixed precision, Adafactor (factored: the preset's shapes)": ("mixed", "adafactor")}


@pytest.mark.parametrize("state", L2_STATES)
def test_lesson_2_published_model_is_memmath_train(state):
    precision, optimizer = L2_STATES[state]
    defs, page = _lesson("02_full_finetuning", state, preset_dropdown="llama-2-7b", precision_dropdown=precision,
                         optimizer_dropdown=optimizer)
    report = _train("llama-2-7b", "--precision", precision, "--optimizer", optimizer, "--gpu", "RTX 4090")
    assert report["settings"]["method"]["name"] == "full"
    n, total, weights = report["model"]["total_params"], _before_activations(report), report["parts"]["weights"]
    memory, available = report["verdict"]["gpu_memory_bytes"], report["verdict"]["available_bytes"]
    recipe, opt = viz.RECIPE_NAMES[precision], viz.OPTIMIZER_NAMES[optimizer]
    assert (f"{viz.short_count(n)} parameters , {recipe} with {opt}: one step of full finetuning keeps {f(total)} "
            f"before activations, {n:,} parameters × {total / n:.2f} B per parameter, of which {f(weights)} are "
            f"weights. The RTX 4090 reports {f(memory)}: it holds the weights, and the run "
            f"{_judged(total, available)}") in page
    # The optimizer's temporaries: the step's peak at 1 x 512 tokens is the command line's requirement.
    peak = _train("llama-2-7b", "--precision", precision, "--optimizer", optimizer, "--batch", "1", "--seq", "512")
    assert f"the step peaks at {f(peak['required']['bytes'])}" in page
    # The optimizer table: every optimizer in the page's recipe, each row the command line's run.
    rows = defs["optimizer_table"].set_index("optimizer")
    for name in mm.OPTIMIZERS:
        other = _train("llama-2-7b", "--precision", precision, "--optimizer", name)
        row = rows.loc[viz.OPTIMIZER_NAMES[name]]
        assert row["total (GB)"] == round(_before_activations(other) / GB, 2), name
        assert row["optimizer states (GB)"] == round(other["parts"]["optimizer_states"] / GB, 2), name
        assert row["fits the RTX 4090"] == ("yes" if _judged(_before_activations(other), available) == "fits"
                                            else "no"), name
    # The cards: each holds the weights and runs the step by the one rule, against `memmath gpus`' memory.
    cards = {c["name"]: c["memory_bytes"] - c["cuda_context_bytes"] for c in _cards()}  # each less its own context
    for row in defs["gpu_rows"].itertuples(index=False):
        assert (row[3], row[4]) == ("yes" if _judged(weights, cards[row.gpu]) == "fits" else "no",
                                    "yes" if _judged(total, cards[row.gpu]) == "fits" else "no"), row.gpu


# ---- lesson 4: freezing ----------------------------------------------------------------------------------
# The opening's model is N parameters in L equal layers, which the command line cannot build (the API's
# uniform_model): checked against a hand derivation. The real-model sections state their runs: a preset with the
# first blocks frozen (all but two to start), the head and final norm training, the embeddings frozen (Freeze's
# defaults, and the command line's), pure bf16 with Adam at 4 sequences of 512 tokens.


def test_lesson_4_ten_equal_layers_are_the_api_and_the_article():
    defs, page = _lesson("04_freezing")
    assert (defs["n_params"], defs["n_layers"], defs["n_frozen"]) == (7 * 10**9, 10, 9)
    model = mm.uniform_model(7 * 10**9, 10)
    frozen = mm.training_memory(model, seq_len=None, precision="bf16", optimizer="adam",
                                method=mm.Freeze(frozen_layers=9))
    full = mm.training_memory(model, seq_len=None, precision="bf16", optimizer="adam")
    # 7e9 x 2 B of weights + 7e8 trainable x (2 + 4) B = 18.2 GB; full finetuning 7e9 x 8 B = 56 GB.
    assert (f(frozen.total), f(full.total)) == (f(18.2e9), f(56e9))
    assert (f"= {f(frozen.total)} , against {f(full.total)} for full finetuning: {f(full.total - frozen.total)} "
            f"saved") in page


L4_MODELS = {"gpt2": 12, "llama-2-7b": 32}  # the default model; an untied head. Blocks, from their config.json.


@pytest.mark.parametrize("model", L4_MODELS)
def test_lesson_4_real_model_is_memmath_train_freeze(model):
    defs, page = (_lesson("04_freezing") if model == "gpt2" else _lesson("04_freezing", model, preset_dropdown=model))
    blocks = L4_MODELS[model]
    assert (defs["model"].name, defs["real_frozen_slider"].value, defs["batch_slider"].value,
            defs["seq_slider"].value) == (model, blocks - 2, 4, 512)
    common = ["--batch", "4", "--seq", "512", "--optimizer", "adam"]
    frozen = _train(model, "--method", "freeze", "--trainable-layers", "2", *common)
    full = _train(model, *common)
    assert frozen["settings"]["precision"] == "bf16"
    n, t = frozen["model"]["total_params"], frozen["model"]["trainable_params"]
    assert f"{model}: {t:,} of {n:,} parameters train, {t / n:.2%} ." in page
    assert f"The backward pass computes {t:,} weight gradients instead of {n:,}" in page
    # The table: each part of full finetuning, of freezing and what freezing saves, then the sums.
    size = viz.readable_size
    for part in ("weights", "gradients", "optimizer_states", "activations"):
        a, b = full["parts"][part], frozen["parts"][part]
        assert f"{mm.training.PART_LABELS[part]} {size(a)} {size(b)} {size(a - b)}" in page, part
    a, b = full["sum_of_parts"], frozen["sum_of_parts"]
    assert f"Total {size(a)} {size(b)} {size(a - b)}" in page


def test_lesson_4_bert_large_report_is_memmath_train_freeze():
    _, page = _lesson("04_freezing")
    common = ["--batch", "4", "--seq", "512", "--optimizer", "adam"]
    full = _train("bert-large-uncased", *common)
    # Houlsby et al. 2019 (top-layer finetuning baseline): about 25% of BERT-large had to train. The page's k is the
    # fewest top blocks whose trainable share, as the command line counts it, reaches 25%.
    k = 7
    at, below = (_train("bert-large-uncased", "--method", "freeze", "--trainable-layers", str(j), *common)
                 for j in (k, k - 1))
    share = at["model"]["trainable_params"] / at["model"]["total_params"]
    assert share >= 0.25 > below["model"]["trainable_params"] / below["model"]["total_params"]
    assert (f"Training the top {k} of 24 blocks (and the pooler) is the first choice that reaches it: {share:.1%}, "
            f"{f(at['sum_of_parts'])} against {f(full['sum_of_parts'])} for full finetuning") in page


# ---- lesson 6: LoRA and QLoRA ----------------------------------------------------------------------------
# The page's runs: a preset (Llama-2-7B to start) with LoRA or QLoRA (NF4, double quantization: the command line's
# defaults) at rank r on the chosen matrices (r = 8 on q, v to start), pure bf16 with AdamW, peft's fp32 adapters.
# "The number" counts them before activations; the side-by-side section adds activations at 4 sequences of 512
# tokens and judges each on an RTX 4090 with its own CUDA context reserved (the command line's default).

L6_STATES = {"defaults: Llama-2-7B, r = 8 on q, v": ("llama-2-7b", 8, "q,v", 4),
             "Llama-3-8B, r = 16 on every linear layer": ("llama-3-8b", 16, "all", 4),
             "defaults at batch 7": ("llama-2-7b", 8, "q,v", 7)}
L6_TARGETS = {"q,v": ("q", "v"), "all": ("q", "k", "v", "o", "gate", "up", "down")}


def _l6(state):
    model, rank, targets, batch = L6_STATES[state]
    if state.startswith("defaults:"):
        return _lesson("06_lora_qlora")
    if batch != 4:
        return _lesson("06_lora_qlora", state, batch_slider=lambda s: mo.ui.slider(1, 64, value=batch))
    return _lesson("06_lora_qlora", state, model_dropdown=model, targets_dropdown=L6_TARGETS[targets],
                   rank_slider=lambda s: mo.ui.slider(steps=s.steps, value=rank))


def _l6_runs(state, *extra):
    model, rank, targets, batch = L6_STATES[state]
    lora = ["--rank", str(rank), "--targets", targets]
    runs = {"full": _train(model, *extra), "lora": _train(model, "--method", "lora", *lora, *extra),
            "qlora": _train(model, "--method", "qlora", *lora, *extra)}
    s = runs["qlora"]["settings"]
    assert (s["precision"], s["optimizer"], s["method"]["adapter_format"]) == ("bf16", "adamw", "fp32")
    return runs


@pytest.mark.parametrize("state", list(L6_STATES)[:2])
def test_lesson_6_number_is_memmath_train(state):
    defs, page = _l6(state)
    model, rank, targets, _ = L6_STATES[state]
    runs = _l6_runs(state)
    t = runs["lora"]["model"]["trainable_params"]
    assert t == runs["lora"]["model"]["adapter_params"] == runs["qlora"]["model"]["trainable_params"]
    assert f"{t:,} trainable parameters" in page
    size = viz.readable_size
    for label, key in (("full finetuning", "full"), (f"LoRA r = {rank}", "lora"), (f"QLoRA r = {rank}", "qlora")):
        p = runs[key]["parts"]
        state_bytes = p["gradients"] + p["gradient_accumulation"] + p["master_weights"] + p["optimizer_states"]
        weights = size(p["weights"] + p["quantization_constants"]) + (" (NF4 + constants)" if key == "qlora" else "")
        assert f"{label} {weights} {size(state_bytes)} {size(_before_activations(runs[key]))}" in page, label


def _l6_rows(state):
    """(page, runs, {method: the table row the command line's run gives}) of the side-by-side section."""
    _, page = _l6(state)
    model, rank, targets, batch = L6_STATES[state]
    runs = _l6_runs(state, "--batch", str(batch), "--seq", "512", "--gpu", "RTX 4090")
    names = {"full": "Full finetuning", "lora": f"LoRA r={rank}", "qlora": f"QLoRA r={rank}"}
    rows = {}
    for key, r in runs.items():
        p = r["parts"]
        state_bytes = p["gradients"] + p["gradient_accumulation"] + p["master_weights"] + p["optimizer_states"]
        # The table's cells: GB rounded (grads + states to 3 decimals) and printed as viz.plain_table prints them.
        cells = [round((p["weights"] + p["quantization_constants"]) / GB, 2), round(state_bytes / GB, 3),
                 round(p["activations"] / GB, 2), round(r["sum_of_parts"] / GB, 2),
                 round(r["verdict"]["required_bytes"] / GB, 2)]  # and what the card must hold
        rows[key] = " ".join([names[key], f"{r['model']['trainable_params']:,}", *map(viz.format_number, cells)])
    return page, runs, rows


@pytest.mark.parametrize("state", list(L6_STATES))
def test_lesson_6_side_by_side_numbers_are_memmath_train(state):
    page, runs, rows = _l6_rows(state)
    for key, row in rows.items():
        assert row in page, row
    usable = runs["full"]["verdict"]["available_bytes"]  # the card's memory less the command line's reserve
    assert f"{f(usable)} usable (the chart's dashed line)" in page


@pytest.mark.parametrize("state", [
    "defaults: Llama-2-7B, r = 8 on q, v",
    # Found when the page judged each run's sum of the parts with no margin: at batch 7 the QLoRA row said
    # yes (23.26 GB), `memmath train --gpu` no (peak 24.16 GB + 5%).
    "defaults at batch 7"])
def test_lesson_6_side_by_side_verdicts_are_memmath_trains(state):
    page, runs, rows = _l6_rows(state)
    for key, r in runs.items():
        assert f"{rows[key]} {'yes' if r['verdict']['fits'] else 'no'}" in page, key


def test_lesson_6_problem_3_is_memmath_train():
    _, page = _lesson("06_lora_qlora")
    # Llama-2-13B, r = 8 on q, v, pure bf16, AdamW, 1 x 512 tokens, checkpointing, on an RTX 4090. The page gives
    # each run's requirement and its sum of the parts, and judges the requirement as the command line does (the
    # CUDA context reserved, 5% kept free; short by the requirement + 5% - usable).
    args = ["--rank", "8", "--targets", "q,v", "--batch", "1", "--seq", "512", "--checkpointing", "--gpu", "RTX 4090"]
    lora, qlora = (_train("llama-2-13b", "--method", m, *args) for m in ("lora", "qlora"))
    available = lora["verdict"]["available_bytes"]
    for name, r in (("LoRA", lora), ("QLoRA", qlora)):
        need = r["required"]["bytes"]
        assert f"{name}: the card must hold {f(need)}" in page
        words = _judged(need, available)
        assert (words in page) and (words == "fits") == r["verdict"]["fits"], name
    assert f"the parts add to {f(lora['sum_of_parts'])}" in page
    assert lora["parts"]["activations"] == qlora["parts"]["activations"]
    assert f"Both keep {f(lora['parts']['activations'])} of activations" in page


def _guanaco():
    # The command line cannot type this run: QLoRA's recipe (bf16 weights and gradients, fp32 Adam states, no
    # master copy) and its bf16 adapters have no flags (`--precision` offers memmath's named recipes, adapters are
    # peft's fp32). So the API: memmath.requirement, what the command line and lesson 8 judge a run on.
    from memmath_lessons.reference.paper_setups import BF16_FP32_STATES  # artidoro/qlora: --bf16, paged_adamw_32bit

    run = mm.Run("llama-65b", precision=BF16_FP32_STATES, optimizer="adamw", batch_size=4, seq_len=528,
                 checkpointing=True, method=mm.QLoRA(rank=64, targets="all", adapter_format="bf16"))
    return mm.requirement(run)


def test_lesson_6_guanaco_parts_are_the_api():
    _, page = _lesson("06_lora_qlora")
    assert "LLaMA 65B, QLoRA r=64 on all linear layers, bf16 adapters, 32-bit AdamW, checkpointing, batch 4 x 528" \
        in page  # the run the page states
    m = _guanaco().memory
    assert (f"Weights and constants take {f(m.weights + m.quantization_constants)} (the NF4 base, with the "
            f"embeddings, head and adapters in bf16); {m.trainable_params:,} adapter parameters add "
            f"{f(m.trainable_state)} of gradients and optimizer states; activations are {f(m.activations)}") in page


# Found: lesson 6 said QLoRA's 65B run "needs" the sum of its parts (47.88 GB, 2.24 GB to spare on the RTX
# A6000) where memmath.requirement, what `memmath train` and lesson 8 judge, is the step's peak (46.48 GB).
def test_lesson_6_guanaco_needs_the_requirement():
    _, page = _lesson("06_lora_qlora")
    need = _guanaco()
    assert need.basis == "peak"
    assert f"This run needs {f(need.bytes)} ({f(need.bytes, 'GiB')})" in page
